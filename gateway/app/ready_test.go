package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// pingStore is a memory store on a pretend network: Ping fails while down.
type pingStore struct {
	*statestore.Memory
	down  atomic.Bool
	pings atomic.Int32
}

func (s *pingStore) Ping(context.Context) error {
	s.pings.Add(1)
	if s.down.Load() {
		return errors.New("out of reach")
	}
	return nil
}

func (s *pingStore) AcceptLoss(context.Context) error { return nil }

// Readiness follows the store's pings, asking at most once a second.
func TestReadinessAsksTheStoreOnceASecond(t *testing.T) {
	t.Parallel()
	st := &pingStore{Memory: statestore.NewMemory(statestore.Options{})}
	r := newReadiness(st)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }

	first, second := r.ready(), r.ready()
	if !first || !second || st.pings.Load() != 1 {
		t.Fatalf("store up: ready twice with %d pings, want 1", st.pings.Load())
	}
	st.down.Store(true)
	now = now.Add(readyCheckEvery / 2)
	if !r.ready() || st.pings.Load() != 1 {
		t.Fatalf("within a second of the last ping: not ready, or pinged again (%d)", st.pings.Load())
	}
	now = now.Add(readyCheckEvery)
	if r.ready() || st.pings.Load() != 2 {
		t.Fatalf("store down a second later: ready, %d pings", st.pings.Load())
	}
	st.down.Store(false)
	now = now.Add(readyCheckEvery)
	if !r.ready() || st.pings.Load() != 3 {
		t.Fatalf("store back: not ready, %d pings", st.pings.Load())
	}
	// A local store has nothing to ask.
	if !newReadiness(statestore.NewMemory(statestore.Options{})).ready() || !newReadiness(nil).ready() {
		t.Fatal("a local store, or none, is not ready")
	}
}

// The gateway serve assembles answers /readyz from its store.
func TestReadyzFollowsTheStore(t *testing.T) {
	t.Parallel()
	st := &pingStore{Memory: statestore.NewMemory(statestore.Options{})}
	st.down.Store(true)
	gw, err := New(context.Background(), Config{Session: session.Options{
		Store: st,
		Log:   slog.New(slog.DiscardHandler),
	}})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the store out of reach: %d %s", res.StatusCode, body)
	}
	if st.pings.Load() != 1 {
		t.Fatalf("%d pings, want 1", st.pings.Load())
	}
}
