package service

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// A refused call's path, which may take up to a megabyte, is logged
// clipped; and past refusedLogBurst lines in refusedLogEvery, refused
// calls are counted, not logged.
func TestRefusedCallsAreLoggedClippedAndBounded(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logRefused := LogRefused(slog.New(slog.NewJSONHandler(&logs, nil)))
	r := httptest.NewRequest(http.MethodPost, "/"+strings.Repeat("a", 100<<10), nil)
	unauthenticated := connect.NewError(connect.CodeUnauthenticated, nil)
	for range refusedLogBurst + 500 {
		logRefused(r, unauthenticated)
	}
	lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
	if len(lines) != refusedLogBurst {
		t.Errorf("%d refused calls: %d lines, want %d", refusedLogBurst+500, len(lines), refusedLogBurst)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || len(lines[0]) > 1024 ||
		rec["procedure"] != "/"+strings.Repeat("a", maxLoggedPath-1)+"…" || rec["code"] != "unauthenticated" {
		t.Errorf("a refused call's line, %d bytes: %.400s, want its path clipped to %d bytes", len(lines[0]), lines[0], maxLoggedPath)
	}
}

// The log of refused calls lets refusedLogBurst lines through every
// refusedLogEvery; the next line let through tells the count of those held
// back.
func TestRefusedLogBoundsItsLines(t *testing.T) {
	t.Parallel()
	var l refusedLog
	t0 := time.Now()
	for i := range refusedLogBurst {
		if ok, held := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok || held != 0 {
			t.Fatalf("line %d: %v %d, want let through", i+1, ok, held)
		}
	}
	for range 7 {
		if ok, _ := l.allow(t0.Add(refusedLogEvery - time.Millisecond)); ok {
			t.Fatalf("a line past %d within %v is let through", refusedLogBurst, refusedLogEvery)
		}
	}
	if ok, held := l.allow(t0.Add(refusedLogEvery)); !ok || held != 7 {
		t.Fatalf("the first line of the next period: %v %d, want let through, telling of the 7 held back", ok, held)
	}
	if ok, held := l.allow(t0.Add(refusedLogEvery + time.Second)); !ok || held != 0 {
		t.Fatalf("the next: %v %d, want let through", ok, held)
	}
}

func TestClipPath(t *testing.T) {
	t.Parallel()
	if p := strings.Repeat("a", maxLoggedPath); clipPath(p) != p {
		t.Errorf("clipPath cut %d bytes", len(p))
	}
	p := strings.Repeat("a", maxLoggedPath-1) + "é"
	if got := clipPath(p); got != strings.Repeat("a", maxLoggedPath-1)+"…" {
		t.Errorf("clipPath(%q) = %q", p, got)
	}
}
