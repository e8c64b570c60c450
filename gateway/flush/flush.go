// Package flush lets a streaming handler send several messages with one
// write and one flush of its response.
//
// connect-go writes each message of a server stream on its own and
// flushes the response after it: on HTTP/2 a hand-over to the
// connection's goroutine and a DATA frame per message (per 4 KiB, the
// server's write buffer, for larger ones), on HTTP/1.1 a chunk and a
// write. A handler that has several messages at hand wraps their sends in
// Hold and Release: the writes in between are gathered into blocks of up
// to holdBytes, the flushes held, and Release writes what is left and
// flushes once if a flush was asked for.
//
// A Writer can also bound how long its writes may block (SetWriteTimeout):
// a client that stops reading, but keeps its connection, would otherwise
// hold the handler's goroutine in a write for good. Another goroutine can
// end a blocked write at once (Interrupt).
package flush

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// holdBytes bounds the bytes a Writer holds back: HTTP/2's default
// largest frame.
const holdBytes = 16 << 10

// buffers holds the buffers of held writes between batches.
var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, holdBytes)
	return &b
}}

type key struct{}

// Writer is an http.ResponseWriter whose writes and flushes its handler
// may hold. It is used by the handler's goroutine only, as a
// ResponseWriter is.
type Writer struct {
	http.ResponseWriter
	f       http.Flusher
	held    bool
	pending bool    // a flush was asked for while held
	buf     *[]byte // writes held back; nil when none, as when not held
	err     error   // of the last write of held bytes
	// timeout bounds each batch of writes (see SetWriteTimeout); rc sets
	// the deadlines.
	timeout time.Duration
	rc      *http.ResponseController
	// mu orders the deadlines the handler sets with Interrupt's, which
	// may come from another goroutine: once interrupted, the deadline
	// stays in the past; once done, the response is no longer touched.
	mu                sync.Mutex
	interrupted, done bool
	// calls counts the starts and the ends of the response's writes and
	// flushes: it is odd while one is under way (Writing).
	calls atomic.Uint64
}

// past is a write deadline that has passed.
var past = time.Unix(1, 0)

// SetWriteTimeout bounds how long the response's writes may block: each
// batch (from Hold to Release) and each write or flush made while not
// held must be done within d of its start, or it fails and the response
// ends. Zero (or less) sets no bound, as a Writer has before. Deadlines are set with
// http.ResponseController; where the response does not support them (a
// recorder in tests), there is no bound. The deadline is cleared once a
// batch is released and once a flush is done: on HTTP/2 a deadline that
// passes resets the stream even with no write under way, which would end
// an idle stream between its messages.
func (w *Writer) SetWriteTimeout(d time.Duration) {
	if w != nil && d > 0 {
		w.timeout = d
		w.refresh()
	}
}

// refresh moves the write deadline to the timeout from now, when there is
// a timeout.
func (w *Writer) refresh() {
	if w.timeout > 0 {
		w.setDeadline(time.Now().Add(w.timeout))
	}
}

// clear removes the write deadline while nothing is being written.
func (w *Writer) clear() {
	if w.timeout > 0 {
		w.setDeadline(time.Time{})
	}
}

// setDeadline sets the write deadline, unless the writes were interrupted.
func (w *Writer) setDeadline(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.interrupted {
		_ = w.rc.SetWriteDeadline(t)
	}
}

// Interrupt makes the response's writes fail from now on: a write blocked
// on a client that reads nothing returns at once with an error, and so
// does every later one, the stream being broken (on HTTP/2 it is reset, on
// HTTP/1.1 its connection is closed). Unlike the Writer's other methods it
// may be called from any goroutine, also once the handler has returned
// (it then does nothing). Where the response has no write deadlines (a
// recorder in tests) it does nothing either. It does nothing on a nil
// Writer.
func (w *Writer) Interrupt() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.interrupted {
		return
	}
	w.interrupted = true
	_ = w.rc.SetWriteDeadline(past)
}

// Write writes p, or while held, adds it to the bytes held back, which
// are written when they would pass holdBytes.
func (w *Writer) Write(p []byte) (int, error) {
	if !w.held {
		w.refresh()
		return w.write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.buf != nil && len(*w.buf)+len(p) > holdBytes {
		if err := w.writeHeld(); err != nil {
			return 0, err
		}
	}
	if len(p) >= holdBytes {
		return w.write(p)
	}
	if w.buf == nil {
		w.buf = buffers.Get().(*[]byte)
	}
	*w.buf = append(*w.buf, p...)
	return len(p), nil
}

// write writes p to the response, counting its start and end.
func (w *Writer) write(p []byte) (int, error) {
	w.calls.Add(1)
	defer w.calls.Add(1)
	return w.ResponseWriter.Write(p)
}

// flush flushes the response, counting its start and end.
func (w *Writer) flush() {
	w.calls.Add(1)
	defer w.calls.Add(1)
	w.f.Flush()
}

// Writing names the write (or flush) of the response under way: 0 when
// there is none, else a number no other write of the response has. The
// same number seen for long says the write is blocked: the client takes
// nothing. It may be called from any goroutine; it is 0 on a nil Writer.
func (w *Writer) Writing() uint64 {
	if w == nil {
		return 0
	}
	if c := w.calls.Load(); c%2 == 1 {
		return c
	}
	return 0
}

// writeHeld writes the bytes held back.
func (w *Writer) writeHeld() error {
	if w.buf == nil {
		return w.err
	}
	b := w.buf
	w.buf = nil
	_, err := w.write(*b)
	*b = (*b)[:0]
	buffers.Put(b)
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Flush flushes the response, unless flushes are held: then it is done at
// Release.
func (w *Writer) Flush() {
	if w.held {
		w.pending = true
		return
	}
	w.refresh()
	w.flush()
	w.clear()
}

// FlushError is Flush for http.ResponseController, with the error of the
// underlying write or flush.
func (w *Writer) FlushError() error {
	if w.held {
		w.pending = true
		return w.err
	}
	w.refresh()
	w.calls.Add(1)
	err := w.rc.Flush()
	w.calls.Add(1)
	w.clear()
	return err
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hold holds writes and flushes until Release; with a write timeout, the
// batch must be written by then. It does nothing on a nil Writer.
func (w *Writer) Hold() {
	if w != nil {
		w.held = true
		w.refresh()
	}
}

// Release stops holding: it writes the bytes held back, and flushes if a
// flush was asked for. It returns the error of writing held bytes, if
// any. It does nothing on a nil Writer.
func (w *Writer) Release() error {
	if w == nil || !w.held {
		return nil
	}
	w.held = false
	err := w.writeHeld()
	if w.pending {
		w.pending = false
		if err == nil {
			w.flush()
		}
	}
	w.clear()
	return err
}

// From returns the Writer of the response being served in ctx, or nil when
// the handler was not wrapped by Holdable.
func From(ctx context.Context) *Writer {
	w, _ := ctx.Value(key{}).(*Writer)
	return w
}

// Holdable wraps h so that its handlers can hold flushes: for requests that
// match, the ResponseWriter is a *Writer, which From finds in the request's
// context. A ResponseWriter that cannot flush is passed on as it is.
func Holdable(h http.Handler, match func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		f, ok := rw.(http.Flusher)
		if !ok || !match(r) {
			h.ServeHTTP(rw, r)
			return
		}
		w := &Writer{ResponseWriter: rw, f: f, rc: http.NewResponseController(rw)}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key{}, w)))
		// Nothing held is left behind by a handler that did not release.
		_ = w.Release()
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
}
