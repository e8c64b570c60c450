package agent

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

const (
	// lineBuffer is the read buffer an agent's stdout holds for the agent's
	// life: about what jsonrpc2's plain stream held for lines of up to
	// 3 KiB (its encoding/json Decoder grows its buffer to twice its
	// capacity and 512 bytes more: 1.5 KiB, then 3.5 KiB).
	lineBuffer = 4 << 10
	// burstBuffer is the read buffer while the agent writes faster than the
	// gateway reads: a read then takes up to this much of the pipe at once,
	// where lineBuffer took a few lines per read(2). Burst buffers are
	// shared by all agents through burstBuffers, so an idle agent holds
	// none.
	burstBuffer = 32 << 10
)

var burstBuffers = sync.Pool{New: func() any { return new([burstBuffer]byte) }}

// lineReader reads an agent's output a line at a time.
//
// Its buffer is its own lineBuffer bytes while each read finds less than
// the room it has. A read that fills the room means the agent has more
// written than the buffer takes: the next reads go to a burst buffer from
// burstBuffers, until a read finds less than the room again. A line longer
// than the buffer gets a buffer of its own, dropped once the line is read.
// Lines are returned in the buffer, valid until the next call.
type lineReader struct {
	r io.Reader
	// buf[start:end] is read and not yet returned.
	buf        []byte
	start, end int
	own        []byte             // the lineBuffer of this reader
	burst      *[burstBuffer]byte // the burst buffer in use, or nil
	// full is whether the last read filled the room it had, ending in
	// the middle of a line.
	full bool
	// err is the read error that follows buf[start:end].
	err error
}

func newLineReader(r io.Reader) *lineReader {
	own := make([]byte, lineBuffer)
	return &lineReader{r: r, buf: own, own: own}
}

// readLine returns the next line without its newline; a last line that has
// none counts. A line over max bytes fails with ErrLineTooLong as soon as
// more than max bytes of it are read. After the output ends, every call
// returns the read error (io.EOF at its end).
func (r *lineReader) readLine(max int) ([]byte, error) {
	// The first seen bytes of buf[start:end] hold no newline.
	seen := 0
	for {
		if i := bytes.IndexByte(r.buf[r.start+seen:r.end], '\n'); i >= 0 {
			line := r.buf[r.start : r.start+seen+i]
			if len(line) > max {
				return nil, r.fail(lineTooLong(max))
			}
			r.start += seen + i + 1
			return line, nil
		}
		seen = r.end - r.start
		if seen > max {
			return nil, r.fail(lineTooLong(max))
		}
		if r.err != nil {
			if seen == 0 {
				r.release()
				return nil, r.err
			}
			line := r.buf[r.start:r.end]
			r.start = r.end
			return line, nil
		}
		r.fill()
	}
}

func lineTooLong(max int) error { return fmt.Errorf("%w: over %d bytes", ErrLineTooLong, max) }

// fail ends reading with err.
func (r *lineReader) fail(err error) error {
	r.err = err
	r.release()
	return err
}

// fill reads once more after the unreturned bytes, moved to the front of
// the buffer that suits the reading: see lineReader.
func (r *lineReader) fill() {
	n := r.end - r.start
	var next []byte
	var burst *[burstBuffer]byte
	switch {
	case n+lineBuffer/2 > burstBuffer:
		// A long line: room for half as much again, in a buffer of its own.
		if n+lineBuffer/2 <= len(r.buf) {
			next = r.buf
		} else {
			next = make([]byte, n+n/2)
		}
	case r.full || n+lineBuffer/2 > lineBuffer:
		if r.burst == nil {
			burst = burstBuffers.Get().(*[burstBuffer]byte)
		} else {
			burst = r.burst
		}
		next = burst[:]
	default:
		next = r.own
	}
	copy(next, r.buf[r.start:r.end])
	if r.burst != nil && r.burst != burst {
		burstBuffers.Put(r.burst)
	}
	r.buf, r.burst, r.start, r.end = next, burst, 0, n
	for range 100 {
		m, err := r.r.Read(r.buf[r.end:])
		// A read that fills the room with whole lines may be all the agent
		// wrote: the next read, which may wait, is not a burst's.
		r.full = m == len(r.buf)-r.end && r.buf[r.end+m-1] != '\n'
		r.end += m
		if m > 0 || err != nil {
			r.err = err
			return
		}
	}
	r.err = io.ErrNoProgress
}

// release gives back the burst buffer, and drops a long line's, once
// reading has ended.
func (r *lineReader) release() {
	if r.burst != nil {
		burstBuffers.Put(r.burst)
		r.burst = nil
	}
	r.buf, r.start, r.end = r.own[:0], 0, 0
}
