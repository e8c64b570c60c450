package server

import (
	"strings"
	"testing"
	"time"
)

// A refusal is logged once every refusalLogEvery; the next line tells the
// count of those held back in between.
func TestRefusalLogSpacesItsLines(t *testing.T) {
	t.Parallel()
	var l refusalLog
	t0 := time.Now()
	allow := func(after time.Duration) (bool, int) { return l.allow(t0.Add(after)) }
	if ok, n := allow(0); !ok || n != 1 {
		t.Fatalf("the first refusal: %v %d, want logged, standing for 1", ok, n)
	}
	for i := range 99 {
		if ok, _ := allow(time.Duration(i) * time.Millisecond); ok {
			t.Fatalf("refusal %d, within %v of the first, is logged", i+2, refusalLogEvery)
		}
	}
	if ok, n := allow(refusalLogEvery); !ok || n != 100 {
		t.Fatalf("a refusal %v after the first: %v %d, want logged, standing for itself and the 99 held back", refusalLogEvery, ok, n)
	}
	if ok, _ := allow(refusalLogEvery + time.Second); ok {
		t.Fatal("a refusal a second after a logged one is logged")
	}
	if ok, n := allow(3 * refusalLogEvery); !ok || n != 2 {
		t.Fatalf("a refusal long after: %v %d, want logged, standing for 2", ok, n)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if s := strings.Repeat("a", maxLoggedBytes); clip(s) != s {
		t.Errorf("clip cut %d bytes", len(s))
	}
	// A two-byte character across the bound is cut whole.
	s := strings.Repeat("a", maxLoggedBytes-1) + "é" + "b"
	if got := clip(s); got != strings.Repeat("a", maxLoggedBytes-1)+"…" {
		t.Errorf("clip(%q) = %q", s, got)
	}
}
