package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// An agent's stderr reaches the log at a bounded rate: 20 MB of it, as
// fast as a pipe takes it, made 33 MB of log in 0.3 s. The lines past the
// rate are counted in one record.
func TestStderrFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	const lines, size = 200000, 100 // 20 MB
	var log bytes.Buffer
	a := &Agent{cfg: Config{Log: slog.New(slog.NewJSONHandler(&log, nil))}}
	a.logStderr(strings.NewReader(strings.Repeat(strings.Repeat("e", size-1)+"\n", lines)))
	logged, dropped := 0, 0
	for rec := range strings.Lines(log.String()) {
		var r struct {
			Msg     string
			Dropped int
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil {
			t.Fatal(err)
		}
		switch r.Msg {
		case "agent stderr":
			logged++
		case "agent stderr: lines dropped":
			dropped += r.Dropped
		}
	}
	if logged+dropped != lines || dropped == 0 {
		t.Fatalf("%d lines logged and %d counted dropped, of %d", logged, dropped, lines)
	}
	// What the burst takes, and what the rate adds while the test runs.
	if logged > 2*stderrBurst*DefaultStderrLines || log.Len() > 2<<20 {
		t.Fatalf("%d lines, %d bytes of log from %d MB of stderr", logged, log.Len(), lines*size>>20)
	}
}

func TestStderrLimit(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	l := newStderrLimit(2, 1000, start) // bursts of 20 lines, 10,000 bytes
	for i := range 20 {
		if _, ok := l.allow(10, start); !ok {
			t.Fatalf("line %d of the burst dropped", i)
		}
	}
	for range 5 {
		if _, ok := l.allow(10, start); ok {
			t.Fatal("a line past the burst logged")
		}
	}
	// A second later two lines' worth came back: the record of the five
	// dropped, and the line.
	if dropped, ok := l.allow(10, at(time.Second)); !ok || dropped != 5 {
		t.Fatalf("after a second: logged %v, %d dropped; want logged, 5", ok, dropped)
	}
	// Bytes bound too: 10,000 bytes a burst, refilled at 1,000 a second.
	l = newStderrLimit(-1, 1000, start)
	if _, ok := l.allow(9000, start); !ok {
		t.Fatal("a line within the byte burst dropped")
	}
	if _, ok := l.allow(2000, start); ok {
		t.Fatal("a line past the byte burst logged")
	}
	if _, ok := l.allow(2000, at(time.Second)); !ok {
		t.Fatal("a line after the bytes came back dropped")
	}
	// No bound at all.
	l = newStderrLimit(-1, -1, start)
	for range 100000 {
		if _, ok := l.allow(8<<10, start); !ok {
			t.Fatal("an unbounded limit dropped a line")
		}
	}
}

// The stderr tail goes to a client in an error message, which a terminal
// may print: it holds no control characters (an agent's escape
// sequences), only valid UTF-8, even where a long line is cut.
func TestStderrTailIsPrintable(t *testing.T) {
	var long stderrTail
	long.add(strings.Repeat("é", StderrTailBytes/2+1)) // cut within a character
	if got := long.String(); !strings.HasSuffix(got, "éé") || !utf8.ValidString(got) {
		t.Fatalf("a long line is not kept cut to its end, in valid UTF-8: %d bytes, %q…", len(got), got[:min(len(got), 8)])
	}
	var tail stderrTail
	tail.add("\x1b]52;c;cHduZWQ=\x07red\x1b[31m \u009b2J\ttab\r")
	tail.add("bad \xff byte")
	got := tail.String()
	for _, r := range strings.ReplaceAll(got, "\n", "") {
		if unicode.IsControl(r) && r != '\t' {
			t.Fatalf("the tail holds control character %U: %q", r, got)
		}
	}
	if !utf8.ValidString(got) {
		t.Fatalf("the tail is not valid UTF-8: %q", got)
	}
	if !strings.Contains(got, "red") || !strings.Contains(got, "\ttab") {
		t.Fatalf("the tail lost its text: %q", got)
	}
}
