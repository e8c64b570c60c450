package flush

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// counter is a ResponseWriter that records its writes and counts its
// flushes.
type counter struct {
	http.ResponseWriter
	writes  []string
	flushes int
}

func (c *counter) Write(p []byte) (int, error) {
	c.writes = append(c.writes, string(p))
	return c.ResponseWriter.Write(p)
}

func (c *counter) Flush() { c.flushes++ }

func TestHeldFlushesAreOneAtRelease(t *testing.T) {
	base := &counter{ResponseWriter: httptest.NewRecorder()}
	var inner http.ResponseWriter
	h := Holdable(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner = w
		fw := From(r.Context())
		if fw == nil || fw != w {
			t.Fatalf("From gave %v, the handler got %T", fw, w)
		}
		f := w.(http.Flusher)
		f.Flush() // not held: at once
		if base.flushes != 1 {
			t.Fatalf("%d flushes after an unheld one", base.flushes)
		}
		fw.Hold()
		for range 5 {
			_, _ = w.Write([]byte("m"))
			f.Flush()
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Fatal(err)
		}
		if base.flushes != 1 || len(base.writes) != 0 {
			t.Fatalf("%d flushes and writes %q while held, want none", base.flushes-1, base.writes)
		}
		if err := fw.Release(); err != nil {
			t.Fatal(err)
		}
		if base.flushes != 2 || len(base.writes) != 1 || base.writes[0] != "mmmmm" {
			t.Fatalf("%d flushes and writes %q at release, want one of each", base.flushes-1, base.writes)
		}
		// Nothing held: no flush.
		fw.Hold()
		for range 2 {
			if err := fw.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if base.flushes != 2 {
			t.Fatalf("a release with nothing held flushed")
		}
	}), func(*http.Request) bool { return true })
	h.ServeHTTP(base, httptest.NewRequest(http.MethodPost, "/s", nil))
	if u, ok := inner.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != base {
		t.Fatalf("%T does not unwrap to the server's writer", inner)
	}
}

// Held writes are gathered into blocks of at most holdBytes, in order;
// a write that large on its own goes as it is.
func TestHeldWritesAreGatheredInBlocks(t *testing.T) {
	base := &counter{ResponseWriter: httptest.NewRecorder()}
	var want strings.Builder
	Holdable(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := From(r.Context())
		fw.Hold()
		for i := range 1000 {
			m := strings.Repeat(strconv.Itoa(i%10), 100)
			want.WriteString(m)
			_, _ = w.Write([]byte(m))
		}
		big := strings.Repeat("b", holdBytes+1)
		want.WriteString(big)
		_, _ = w.Write([]byte(big))
		_, _ = w.Write([]byte("end"))
		want.WriteString("end")
		// Left held: written when the handler returns.
	}), func(*http.Request) bool { return true }).ServeHTTP(base, httptest.NewRequest(http.MethodPost, "/s", nil))
	if got := strings.Join(base.writes, ""); got != want.String() {
		t.Fatal("the bytes written are not the bytes written to the Writer, in order")
	}
	for i, w := range base.writes {
		if len(w) > holdBytes && w != strings.Repeat("b", holdBytes+1) {
			t.Fatalf("write %d is %d bytes", i, len(w))
		}
	}
	if n := len(base.writes); n > 100000/holdBytes+4 {
		t.Fatalf("%d writes for 100 KB in 100-byte pieces", n)
	}
	if base.flushes != 0 {
		t.Fatalf("%d flushes, none asked for", base.flushes)
	}
}

func TestOnlyMatchingFlushableResponsesAreWrapped(t *testing.T) {
	var got http.ResponseWriter
	h := Holdable(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = w
		if From(r.Context()) != nil {
			t.Error("From found a Writer for an unwrapped response")
		}
		// Nil-safe, for handlers served without the wrapper.
		From(r.Context()).Hold()
		if err := From(r.Context()).Release(); err != nil {
			t.Error(err)
		}
	}), func(r *http.Request) bool { return r.URL.Path == "/stream" })
	base := &counter{ResponseWriter: httptest.NewRecorder()}
	h.ServeHTTP(base, httptest.NewRequest(http.MethodPost, "/unary", nil))
	if got != base {
		t.Fatalf("a request that does not match got %T", got)
	}
	// A writer that cannot flush is not made to look as if it could.
	plain := struct{ http.ResponseWriter }{httptest.NewRecorder()}
	h = Holdable(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got = w }), func(*http.Request) bool { return true })
	h.ServeHTTP(plain, httptest.NewRequest(http.MethodPost, "/stream", nil))
	if _, ok := got.(http.Flusher); ok {
		t.Fatal("a writer that cannot flush was wrapped in one that can")
	}
}

// broken is a ResponseWriter whose writes fail.
type broken struct{ counter }

var errBroken = errors.New("broken pipe")

func (b *broken) Write([]byte) (int, error) { return 0, errBroken }

// A held write that fails is reported by the writes after it and by
// Release, which then does not flush.
func TestHeldWriteErrorsAreKept(t *testing.T) {
	base := &broken{counter{ResponseWriter: httptest.NewRecorder()}}
	Holdable(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := From(r.Context())
		fw.Hold()
		if _, err := w.Write(make([]byte, holdBytes-1)); err != nil {
			t.Fatalf("a held write that fits: %v", err)
		}
		if _, err := w.Write([]byte("xx")); !errors.Is(err, errBroken) {
			t.Fatalf("the write that sends the held bytes: err %v", err)
		}
		if _, err := w.Write([]byte("y")); !errors.Is(err, errBroken) {
			t.Fatalf("a held write after a failed one: err %v", err)
		}
		w.(http.Flusher).Flush()
		if err := fw.Release(); !errors.Is(err, errBroken) {
			t.Fatalf("Release: err %v", err)
		}
		if base.flushes != 0 {
			t.Fatal("Release flushed after a failed write")
		}
	}), func(*http.Request) bool { return true }).ServeHTTP(base, httptest.NewRequest(http.MethodPost, "/s", nil))
}
