package acpnet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// inProcess is an http.RoundTripper that serves every request with a
// handler in this process: the bridge behind /acp calls the gateway's own
// SessionService through it, as a Connect client, with no socket between.
// The request's context goes to the handler as it is, so the user that the
// /acp request authenticated as (auth.User) is the user of every call: no
// credential is made up, and nothing outside the process can reach the
// handler this way.
type inProcess struct {
	h http.Handler
	// wg counts the handlers running.
	wg *sync.WaitGroup
}

// peerKey carries the /acp client's address, for the calls' RemoteAddr
// (access log, throttles).
type peerKey struct{}

func withPeer(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, peerKey{}, addr)
}

// RoundTrip implements http.RoundTripper. The response is returned once
// the handler has sent its headers (written, flushed or returned); its
// body is what the handler writes, as it writes it.
func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr, _ = ctx.Value(peerKey{}).(string)
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, committed: make(chan struct{})}
	t.wg.Go(func() {
		defer func() {
			if p := recover(); p != nil {
				// As net/http does: the one call fails, the process
				// goes on.
				w.commit(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("acpnet: the handler panicked: %v", p))
			}
			w.commit(http.StatusOK)
			w.stopTimer()
			_ = pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	})
	select {
	case <-w.committed:
	case <-ctx.Done():
		_ = pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)),
		StatusCode:    w.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          pr,
		ContentLength: -1,
		Request:       req,
	}, nil
}

// pipeWriter is the http.ResponseWriter of an in-process request: the
// body goes through a pipe to the caller.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter

	once      sync.Once
	committed chan struct{}
	code      int
	sent      http.Header

	mu    sync.Mutex
	timer *time.Timer
}

func (w *pipeWriter) Header() http.Header { return w.header }

// commit sends the headers, once.
func (w *pipeWriter) commit(code int) {
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.committed)
	})
}

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 200 { // informational answers are not passed on
		w.commit(code)
	}
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.commit(http.StatusOK)
	return w.pw.Write(p)
}

// Flush implements http.Flusher: the pipe holds nothing back, so it only
// sends the headers.
func (w *pipeWriter) Flush() { w.commit(http.StatusOK) }

// SetWriteDeadline lets the service's stream write timeout
// (http.ResponseController) cut a caller that stopped reading, as it cuts
// a network client: past the deadline the body fails.
func (w *pipeWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if !t.IsZero() {
		w.timer = time.AfterFunc(time.Until(t), func() { _ = w.pw.CloseWithError(os.ErrDeadlineExceeded) })
	}
	return nil
}

func (w *pipeWriter) stopTimer() { _ = w.SetWriteDeadline(time.Time{}) }
