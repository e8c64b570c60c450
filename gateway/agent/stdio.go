package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// stdio joins the agent's stdout and stdin into one stream.
type stdio struct {
	r io.Reader
	w io.WriteCloser
}

func (s *stdio) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *stdio) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *stdio) Close() error                { return s.w.Close() }

// ErrLineTooLong is the protocol error of an agent line over the limit.
var ErrLineTooLong = errors.New("agent output line too long")

// lineLimiter fails the read of a line longer than max bytes, so that an
// agent cannot make the gateway buffer unbounded output.
type lineLimiter struct {
	r   io.Reader
	max int
	cur int // bytes of the current line so far
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	chunk := p[:n]
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			l.cur += len(chunk)
			break
		}
		l.cur += i
		if l.cur > l.max {
			break
		}
		l.cur = 0
		chunk = chunk[i+1:]
	}
	if l.cur > l.max {
		return 0, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, l.max)
	}
	return n, err
}

// recordingStream remembers why reading failed, so the agent's end can be
// explained (a line that is not JSON, a line too long).
type recordingStream struct {
	jsonrpc2.ObjectStream
	mu      sync.Mutex
	readErr error
}

func (s *recordingStream) ReadObject(v any) error {
	err := s.ObjectStream.ReadObject(v)
	if err != nil {
		s.mu.Lock()
		if s.readErr == nil {
			s.readErr = err
		}
		s.mu.Unlock()
	}
	return err
}

func (s *recordingStream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readErr
}

// discardLogger silences jsonrpc2's own logging; the agent package logs
// what matters through slog.
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
