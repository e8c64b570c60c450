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

// lineStream is the jsonrpc2 object stream over the editor's stdin and
// stdout: one JSON object per line. Unlike jsonrpc2's plain stream, a line
// that is not a JSON-RPC message does not end the connection: the editor
// gets a JSON-RPC error (with a null id, as the specification asks when the
// request's id cannot be known) and the next line is read.
type lineStream struct {
	r       *bufio.Reader
	in      io.Reader
	out     io.Writer
	maxLine int

	wmu sync.Mutex
}

func newLineStream(in io.Reader, out io.Writer, maxLine int) *lineStream {
	return &lineStream{r: bufio.NewReaderSize(in, 64<<10), in: in, out: out, maxLine: maxLine}
}

// ReadObject implements jsonrpc2.ObjectStream.
func (s *lineStream) ReadObject(v any) error {
	for {
		line, tooLong, err := s.readLine()
		switch {
		case tooLong:
			s.refuse(-32600, fmt.Sprintf("Invalid request: a line longer than %d bytes", s.maxLine))
		case len(bytes.TrimSpace(line)) > 0:
			// jsonrpc2 may leave a half-decoded message behind on failure.
			reflect.ValueOf(v).Elem().SetZero()
			derr := json.Unmarshal(line, v)
			if derr == nil {
				return nil
			}
			if json.Valid(line) {
				s.refuse(-32600, "Invalid request: not a JSON-RPC 2.0 request or response: "+derr.Error())
			} else {
				s.refuse(-32700, "Parse error: a line that is not JSON")
			}
		}
		if err != nil {
			return err
		}
	}
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

// refuse tells the editor that a line was not understood.
func (s *lineStream) refuse(code int, msg string) {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg},
	})
	_ = s.writeLine(b)
}

// WriteObject implements jsonrpc2.ObjectStream.
func (s *lineStream) WriteObject(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.writeLine(b)
}

func (s *lineStream) writeLine(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.out.Write(append(b, '\n'))
	return err
}

// Close implements jsonrpc2.ObjectStream: it closes the input and the
// output where they can be closed, which ends a read blocked on the input.
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
