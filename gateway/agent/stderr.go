package agent

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults of Config.StderrLines and StderrBytes.
const (
	DefaultStderrLines = 100
	DefaultStderrBytes = 64 << 10
	// stderrBurst is how many seconds' worth of lines and bytes the log
	// takes at once, before the rate holds.
	stderrBurst = 10
)

// logStderr logs the agent's stderr a line at a time (each cut to
// maxStderrLine), at most at the rate the Config sets: an agent may write
// as much as it likes (20 MB of stderr made 33 MB of log in 0.3 s), and
// the lines past the rate are read and dropped, then counted in one
// "agent stderr: lines dropped" record when logging resumes or the
// stderr ends.
//
// The loop's frame is kept as small as it was without the limit: the
// goroutine idles for the agent's life with the stack its deepest call
// (a log record) grew it to, and a larger frame doubled the stack of many.
func (a *Agent) logStderr(r io.Reader) {
	br := bufio.NewReaderSize(r, 512) // longer lines are read in pieces
	lim := newStderrLimit(a.cfg.StderrLines, a.cfg.StderrBytes, time.Now())
	for {
		line, err := readLine(br, maxStderrLine)
		if len(line) > 0 {
			a.tail.add(line)
		}
		if len(line) > 0 && a.stderrAllowed(lim, len(line)) {
			a.cfg.Log.Info("agent stderr", "line", line)
		}
		if err != nil {
			a.logDropped(lim.dropped)
			return
		}
	}
}

// stderrAllowed reports whether a line of n bytes is logged now, and logs
// first the record of the lines dropped before it.
func (a *Agent) stderrAllowed(lim *stderrLimit, n int) bool {
	dropped, ok := lim.allow(n, time.Now())
	if ok {
		a.logDropped(dropped)
	}
	return ok
}

// logDropped logs that n lines of stderr were dropped, if any were.
func (a *Agent) logDropped(n int) {
	if n > 0 {
		a.cfg.Log.Warn("agent stderr: lines dropped", "dropped", n)
	}
}

// stderrLimit is a token bucket of lines and one of bytes.
type stderrLimit struct {
	// lineRate and byteRate refill the buckets, a second's worth a
	// second; zero for a bucket that sets no bound.
	lineRate, byteRate float64
	lines, bytes       float64
	last               time.Time
	// dropped counts the lines dropped since the last one logged.
	dropped int
}

// newStderrLimit returns a full bucket of lines and bytes a second: zero
// for the defaults, less than zero for no bound.
func newStderrLimit(lines, bytes int, now time.Time) *stderrLimit {
	rate := func(v, def int) float64 {
		switch {
		case v == 0:
			return float64(def)
		case v < 0:
			return 0
		}
		return float64(v)
	}
	l := &stderrLimit{lineRate: rate(lines, DefaultStderrLines), byteRate: rate(bytes, DefaultStderrBytes), last: now}
	l.lines, l.bytes = stderrBurst*l.lineRate, stderrBurst*l.byteRate
	return l
}

// allow reports whether a line of n bytes is logged at now, taking its
// tokens (and a line's for the record of the lines dropped before it,
// which it returns, if any); else it counts the line dropped.
func (l *stderrLimit) allow(n int, now time.Time) (dropped int, ok bool) {
	elapsed := max(now.Sub(l.last).Seconds(), 0)
	l.last = now
	l.lines = min(l.lines+elapsed*l.lineRate, stderrBurst*l.lineRate)
	l.bytes = min(l.bytes+elapsed*l.byteRate, stderrBurst*l.byteRate)
	lines, bytes := 1.0, min(float64(n), stderrBurst*l.byteRate) // a line over the burst still passes, once full
	if l.dropped > 0 {
		lines++
	}
	if l.lineRate > 0 && l.lines < lines || l.byteRate > 0 && l.bytes < bytes {
		l.dropped++
		return 0, false
	}
	if l.lineRate > 0 {
		l.lines -= lines
	}
	if l.byteRate > 0 {
		l.bytes -= bytes
	}
	dropped, l.dropped = l.dropped, 0
	return dropped, true
}

// Bounds of the stderr an agent that failed to start is reported with.
const (
	// StderrTailLines is how many of its last lines are kept.
	StderrTailLines = 20
	// StderrTailBytes bounds them together; a longer line keeps its end.
	StderrTailBytes = 4 << 10
)

// stderrTail keeps the last lines of an agent's stderr, every line (not
// only those logged), within StderrTailLines and StderrTailBytes.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	bytes int
}

func (t *stderrTail) add(line string) {
	// It goes to a client, whose terminal may print it: no escape
	// sequences, and valid UTF-8.
	line = strings.Map(func(r rune) rune { // invalid bytes become U+FFFD
		if unicode.IsControl(r) && r != '\t' {
			return ' '
		}
		return r
	}, line)
	if len(line) >= StderrTailBytes {
		// Cut at a character, with room for its newline.
		i := len(line) - StderrTailBytes + 1 + len("…")
		for i < len(line) && !utf8.RuneStart(line[i]) {
			i++
		}
		line = "…" + line[i:]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	t.bytes += len(line) + 1
	for len(t.lines) > StderrTailLines || t.bytes > StderrTailBytes {
		t.bytes -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// StartError is the error of an agent that started but did not answer
// initialize as an ACP agent: it ended, broke the protocol, did not answer
// in time, or answered as no ACP agent does.
type StartError struct {
	// Err says what went wrong; its message has no stderr in it.
	Err error
	// Stderr is the last of what the agent wrote to its stderr
	// (StderrTailLines, StderrTailBytes), often the real cause; empty when
	// it wrote nothing. It is the business of the user whose agent it is:
	// give it to them alone.
	Stderr string
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// ErrNotACP is wrapped by the error of a program that does not speak ACP
// on its stdout: one that echoes its input, writes lines that are not
// JSON-RPC, or answers initialize without a protocol version.
var ErrNotACP = errors.New("not an ACP agent")
