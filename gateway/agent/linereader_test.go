package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// chunks is a reader that returns at most the next size of sizes bytes per
// Read (the last size over and over), and counts its reads.
type chunks struct {
	data  []byte
	sizes []int
	reads int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := c.sizes[0]
	if len(c.sizes) > 1 {
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// lines returns count lines of about size bytes each, numbered.
func lines(count, size int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("%06d %s", i, strings.Repeat("x", size-7))
	}
	return out
}

func readAll(t *testing.T, r *lineReader, max int) []string {
	t.Helper()
	var got []string
	for {
		line, err := r.readLine(max)
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
}

// Lines come out whole and in order however the reads split them, long
// lines and a last line without a newline included.
func TestLineReaderSplits(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var want []string
		for range rng.IntN(300) {
			size := rng.IntN(600)
			if rng.IntN(50) == 0 {
				size = rng.IntN(3 * burstBuffer)
			}
			want = append(want, strings.Repeat(string(rune('a'+rng.IntN(26))), size))
		}
		data := strings.Join(want, "\n")
		if len(want) > 0 && (rng.IntN(2) == 0 || want[len(want)-1] == "") {
			data += "\n" // else the last line has no newline
		}
		sizes := make([]int, 1+rng.IntN(20))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(2*burstBuffer)
		}
		r := newLineReader(&chunks{data: []byte(data), sizes: sizes})
		got := readAll(t, r, 1<<20)
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
			t.Fatalf("round %d: %d lines read, want %d", round, len(got), len(want))
		}
		if _, err := r.readLine(1 << 20); !errors.Is(err, io.EOF) {
			t.Fatalf("round %d: after the end: %v", round, err)
		}
		if r.burst != nil {
			t.Fatalf("round %d: the burst buffer is kept after the end", round)
		}
	}
}

// A backlog is read a burst buffer at a time; an agent that writes less
// than a read takes goes back to the reader's own small buffer, which is
// all an idle agent holds.
func TestLineReaderBursts(t *testing.T) {
	t.Parallel()
	backlog := strings.Join(lines(2000, 500), "\n") + "\n" // about 1 MiB
	src := &chunks{data: []byte(backlog), sizes: []int{1 << 30}}
	r := newLineReader(src)
	for i := range 2000 {
		line, err := r.readLine(1 << 20)
		if err != nil || !bytes.HasPrefix(line, fmt.Appendf(nil, "%06d ", i)) {
			t.Fatalf("line %d: %.10q, %v", i, line, err)
		}
	}
	// With lineBuffer bytes a read, the backlog takes about 250 reads.
	if max := len(backlog)/(burstBuffer-lineBuffer) + 2; src.reads > max {
		t.Fatalf("%d reads for %d bytes of backlog, want at most %d", src.reads, len(backlog), max)
	}
	if r.burst == nil {
		t.Fatal("no burst buffer while the reads fill it")
	}

	// The agent now writes a line at a time.
	src.data, src.sizes = []byte(strings.Join(lines(3, 500), "\n")+"\n"), []int{501}
	for range 3 {
		if _, err := r.readLine(1 << 20); err != nil {
			t.Fatal(err)
		}
	}
	// The next read, which would wait for the agent, is into the small
	// buffer.
	src.data = []byte("next\n")
	if line, err := r.readLine(1 << 20); err != nil || string(line) != "next" {
		t.Fatalf("%q, %v", line, err)
	}
	if r.burst != nil || len(r.buf) != lineBuffer {
		t.Fatalf("reading a line at a time: a buffer of %d bytes, burst buffer %v", len(r.buf), r.burst != nil)
	}

	// A line longer than the burst buffer gets one of its own, dropped
	// after it.
	long := strings.Repeat("y", 5*burstBuffer)
	src.data, src.sizes = []byte(long+"\nafter\n"), []int{1 << 30}
	if line, err := r.readLine(1 << 20); err != nil || string(line) != long {
		t.Fatalf("the long line: %d bytes, %v", len(line), err)
	}
	src.sizes = []int{1}
	if line, err := r.readLine(1 << 20); err != nil || string(line) != "after" {
		t.Fatalf("%q, %v", line, err)
	}
	src.data = []byte("last\n")
	if _, err := r.readLine(1 << 20); err != nil || len(r.buf) != lineBuffer {
		t.Fatalf("after the long line: a buffer of %d bytes, %v", len(r.buf), err)
	}
}

// sizes is a reader that notes the room of each Read.
type sizes struct {
	chunks
	rooms []int
}

func (s *sizes) Read(p []byte) (int, error) {
	s.rooms = append(s.rooms, len(p))
	return s.chunks.Read(p)
}

// Output that fills the small buffer exactly with whole lines, then stops,
// is not a burst: the read that waits for more is into the small buffer.
func TestLineReaderExactFillIsNotABurst(t *testing.T) {
	t.Parallel()
	src := &sizes{chunks: chunks{data: []byte(strings.Repeat("x", lineBuffer-1) + "\n"), sizes: []int{1 << 30}}}
	r := newLineReader(src)
	if line, err := r.readLine(1 << 20); err != nil || len(line) != lineBuffer-1 {
		t.Fatalf("%d bytes, %v", len(line), err)
	}
	if _, err := r.readLine(1 << 20); !errors.Is(err, io.EOF) {
		t.Fatalf("the end: %v", err)
	}
	if len(src.rooms) < 2 || src.rooms[1] != lineBuffer {
		t.Fatalf("reads with room %v; the second, which waits, should have %d", src.rooms, lineBuffer)
	}
}

// A line over the limit fails as soon as the limit is passed, and reading
// ends there, the burst buffer given back.
func TestLineReaderLimit(t *testing.T) {
	t.Parallel()
	src := &chunks{data: []byte(strings.Repeat("z", 10*burstBuffer) + "\n"), sizes: []int{1 << 30}}
	r := newLineReader(src)
	const max = 2*burstBuffer + 10
	_, err := r.readLine(max)
	if !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("%v, want a line too long", err)
	}
	if len(src.data) == 0 {
		t.Fatal("the whole line was read before failing")
	}
	if _, again := r.readLine(max); !errors.Is(again, ErrLineTooLong) || r.burst != nil {
		t.Fatalf("reading on: %v (burst buffer kept: %v)", again, r.burst != nil)
	}
}
