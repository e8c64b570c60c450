package bridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
)

// DefaultMaxLine bounds one line the editor sends. A longer line is refused
// with a JSON-RPC error and skipped; the connection goes on.
const DefaultMaxLine = 64 << 20

// Messages carries whole JSON-RPC messages between the bridge and one
// client: a line each on stdio ([Serve]), a text frame each on a
// WebSocket, a POST body or an SSE event over HTTP. [ServeMessages] serves
// ACP on any of them.
type Messages interface {
	// Read returns the next message from the client. An error that wraps
	// [ErrTooLarge] reports a message that was skipped for its size: the
	// client is told, and the next one is read. Any other error ends the
	// connection.
	Read() ([]byte, error)
	// Write sends the client one message. Write is not called
	// concurrently.
	Write(msg []byte) error
	// Close ends the connection; a Read blocked in it returns.
	Close() error
}

// ErrTooLarge is wrapped by the error [Messages.Read] returns for a message
// over its size limit, which is skipped.
var ErrTooLarge = errors.New("message too large")

// objectStream is the jsonrpc2 object stream over Messages. Unlike
// jsonrpc2's plain stream, a message that is not a JSON-RPC message does
// not end the connection: the client gets a JSON-RPC error (with a null id,
// as the specification asks when the request's id cannot be known) and the
// next message is read.
type objectStream struct {
	m   Messages
	wmu sync.Mutex
}

// ReadObject implements jsonrpc2.ObjectStream.
func (s *objectStream) ReadObject(v any) error {
	for {
		msg, err := s.m.Read()
		switch {
		case errors.Is(err, ErrTooLarge):
			s.refuse(-32600, "Invalid request: "+err.Error())
			continue
		case err != nil:
			return err
		case len(bytes.TrimSpace(msg)) == 0:
			continue
		}
		// jsonrpc2 may leave a half-decoded message behind on failure.
		reflect.ValueOf(v).Elem().SetZero()
		derr := json.Unmarshal(msg, v)
		if derr == nil {
			return nil
		}
		if json.Valid(msg) {
			s.refuse(-32600, "Invalid request: not a JSON-RPC 2.0 request or response: "+derr.Error())
		} else {
			s.refuse(-32700, "Parse error: a message that is not JSON")
		}
	}
}

// refuse tells the client that a message was not understood.
func (s *objectStream) refuse(code int, msg string) {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg},
	})
	_ = s.write(b)
}

// WriteObject implements jsonrpc2.ObjectStream.
func (s *objectStream) WriteObject(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(b)
}

// writeAt writes msg, made from an event of session id, at position at
// where the transport numbers messages so (Positioned).
func (s *objectStream) writeAt(id string, at Position, msg []byte) error {
	p, ok := s.m.(Positioned)
	if !ok {
		return s.write(msg)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return p.WriteAt(id, at, msg)
}

// reached tells a Positioned transport that the client has session id
// through at.
func (s *objectStream) reached(id string, at Position) {
	if p, ok := s.m.(Positioned); ok {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		p.Reached(id, at)
	}
}

func (s *objectStream) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.m.Write(b)
}

// Close implements jsonrpc2.ObjectStream.
func (s *objectStream) Close() error { return s.m.Close() }

// lineStream is [Messages] over the editor's stdin and stdout: one JSON
// object per line.
type lineStream struct {
	r       *bufio.Reader
	in      io.Reader
	out     io.Writer
	maxLine int
}

func newLineStream(in io.Reader, out io.Writer, maxLine int) *objectStream {
	return &objectStream{m: &lineStream{r: bufio.NewReaderSize(in, 64<<10), in: in, out: out, maxLine: maxLine}}
}

// Read implements [Messages]: it returns the next line, without its end.
func (s *lineStream) Read() ([]byte, error) {
	line, tooLong, err := s.readLine()
	if tooLong {
		// The error, if any, comes with the next Read.
		return nil, fmt.Errorf("%w: a line longer than %d bytes", ErrTooLarge, s.maxLine)
	}
	if len(line) > 0 {
		return line, nil // the last line, with no end: io.EOF comes next
	}
	return line, err
}

// readLine reads one line without its end. A line over maxLine bytes
// without its end is read to its end and dropped, and tooLong is set.
func (s *lineStream) readLine() (line []byte, tooLong bool, err error) {
	for {
		frag, err := s.r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > s.maxLine+2 { // room for "\r\n"
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > s.maxLine {
			return nil, true, err
		}
		return line, tooLong, err
	}
}

// Write implements [Messages].
func (s *lineStream) Write(b []byte) error {
	_, err := s.out.Write(append(b, '\n'))
	return err
}

// Close implements [Messages]: it closes the input and the output where
// they can be closed, which ends a read blocked on the input.
func (s *lineStream) Close() error {
	var errs []error
	if c, ok := s.in.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	if c, ok := s.out.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
