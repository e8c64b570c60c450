package agent

import (
	"encoding/json"
	"errors"
	"io"
	"sync/atomic"
)

// ErrLineTooLong is the protocol error of an agent line over the limit.
var ErrLineTooLong = errors.New("agent output line too long")

// lineStream is the jsonrpc2.ObjectStream of an agent: ACP's stdio
// transport, one JSON-RPC message per line each way.
//
// It reads a line at a time, and fails a line longer than max bytes (without
// its newline) with ErrLineTooLong as soon as it is that long, so that an
// agent cannot make the gateway buffer unbounded output. Each line is
// offered to direct first, which takes the session/update notifications in
// one pass (see [Agent.updateLine]); the others are unmarshalled into the
// message jsonrpc2 reads, as its plain object stream would. Lines holding
// only whitespace are skipped. A line that is a JSON-RPC batch (an array of
// messages) is read as its messages, one after another, each offered to
// direct first; their answers go back one by one, as JSON-RPC 2.0 lets a
// batch's be matched by id. The first error (a line that is not JSON, a line
// too long, an empty batch, the end of the output) ends reading: onEnd is
// told of it, so that the agent's end can be explained, and every later
// read returns it.
type lineStream struct {
	r      *lineReader
	max    int
	direct func(line []byte) bool
	// batch holds the messages of a batch line not read yet.
	batch []json.RawMessage
	// end is the error that ends reading, returned once the lines before it
	// are read.
	end error
	// settle, if set, is called in the read loop before a line direct did
	// not take is handed on, and before onEnd: it waits until what direct
	// set going is done, so that messages are handled in their order.
	settle func()
	// onEnd, if set, is called once, in the read loop, with the error that
	// ends reading.
	onEnd func(error)
	// gate, if set, is called in the read loop before each line is read:
	// it may wait, and the agent's output is not read meanwhile.
	gate func()
	// directLines counts the lines direct took, for the tests.
	directLines atomic.Uint64

	w   io.WriteCloser
	enc *json.Encoder
}

func newLineStream(r io.Reader, w io.WriteCloser, max int, direct func([]byte) bool) *lineStream {
	return &lineStream{r: newLineReader(r), max: max, direct: direct, w: w, enc: json.NewEncoder(w)}
}

// ReadObject implements jsonrpc2.ObjectStream. It runs in jsonrpc2's read
// loop, and so does direct: what the agent sends is handled in its order.
func (s *lineStream) ReadObject(v any) error {
	for {
		line, err := s.next()
		if err == nil {
			if blank(line) {
				continue
			}
			if s.direct != nil && s.direct(line) {
				s.directLines.Add(1)
				continue
			}
			if s.settle != nil {
				s.settle()
			}
			if err = json.Unmarshal(line, v); err == nil {
				return nil
			}
			s.end = err
		}
		if s.settle != nil {
			s.settle()
		}
		if f := s.onEnd; f != nil {
			s.onEnd = nil
			f(err)
		}
		return err
	}
}

// errEmptyBatch ends an agent that sends an empty batch, which JSON-RPC 2.0
// calls an invalid request.
var errEmptyBatch = errors.New("an empty JSON-RPC batch")

// next returns the next message: a line, or the next of a batch line's
// messages. It is valid until the next call.
func (s *lineStream) next() ([]byte, error) {
	if len(s.batch) == 0 {
		line, err := s.readLine()
		if err != nil || !isBatch(line) {
			return line, err
		}
		if err := json.Unmarshal(line, &s.batch); err != nil {
			s.end = err
			return nil, err
		}
		if len(s.batch) == 0 {
			s.end = errEmptyBatch
			return nil, s.end
		}
	}
	m := s.batch[0]
	s.batch[0] = nil
	s.batch = s.batch[1:]
	return m, nil
}

// isBatch reports whether line, not blank, is a JSON array.
func isBatch(line []byte) bool {
	for _, c := range line {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '['
	}
	return false
}

// readLine returns the next line without its newline; a last line that has
// none counts. The line is valid until the next call.
func (s *lineStream) readLine() ([]byte, error) {
	if s.end != nil {
		return nil, s.end
	}
	if s.gate != nil {
		s.gate()
	}
	line, err := s.r.readLine(s.max)
	if err != nil {
		s.end = err
	}
	return line, err
}

// blank reports whether line holds only JSON whitespace, which jsonrpc2's
// plain object stream skips between messages.
func blank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// WriteObject implements jsonrpc2.ObjectStream: the message as one line of
// JSON. jsonrpc2 does not write two messages at once.
func (s *lineStream) WriteObject(obj any) error { return s.enc.Encode(obj) }

// Close implements jsonrpc2.ObjectStream: it closes the agent's stdin.
func (s *lineStream) Close() error { return s.w.Close() }
