package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// sharedMemory is a memory store with leases, standing in for a store two
// replicas share.
type sharedMemory struct {
	*statestore.Memory
	mu     sync.Mutex
	leases map[string]string
}

// newSharedMemory returns a memory store whose leases are shared, as a
// store several replicas use.
func newSharedMemory() *sharedMemory {
	return &sharedMemory{Memory: statestore.NewMemory(statestore.Options{}), leases: map[string]string{}}
}

func (s *sharedMemory) AcquireLease(_ context.Context, id, holder string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.leases[id]; h != "" && h != holder {
		return statestore.ErrLeaseHeld
	}
	s.leases[id] = holder
	return nil
}

func (s *sharedMemory) ReleaseLease(_ context.Context, id, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[id] == holder {
		delete(s.leases, id)
	}
	return nil
}

func (s *sharedMemory) LeaseHolder(_ context.Context, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[id], nil
}

func TestReplicaStepsAsideWhenAnotherWroteTheLog(t *testing.T) {
	st := newSharedMemory()
	m := NewManager(Options{Store: st, Replica: "a", IdleTimeout: -1, LeaseTTL: time.Hour})
	defer m.Close()
	ctx := context.Background()
	rec := &statestore.Session{ID: "s1", Agent: "x", Cwd: "/", State: statestore.StateAgentLost, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s, err := m.Get(ctx, "", "s1")
	if err != nil {
		t.Fatal(err)
	}
	w := s.Watch(0)
	// Another replica, believing a's lease lapsed, appends to the log.
	if err := st.Append(ctx, "s1", storetest.Encode(t, &acpv2.SessionEvent{Seq: 1}), nil); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	err = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{}}}}, nil)
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("queueing an event: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := next(wctx, w); !errors.Is(err, ErrMoved) {
		t.Fatalf("watcher of the stale session: err = %v, want ErrMoved", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for m.local("s1") != nil || leaseOf(st, "s1") == "a" {
		if time.Now().After(deadline) {
			t.Fatal("the stale replica kept the session or its lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Prompt(ctx, nil); !errors.Is(err, ErrMoved) {
		t.Fatalf("prompt to the stale session: err = %v, want ErrMoved", err)
	}
}

func leaseOf(st *sharedMemory, id string) string {
	h, _ := st.LeaseHolder(context.Background(), id)
	return h
}

// slowStore widens the window between reading a session and acting on it.
type slowStore struct{ *statestore.Memory }

func (s slowStore) GetSession(ctx context.Context, id string) (*statestore.Session, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Memory.GetSession(ctx, id)
}

func TestConcurrentRequestsRestoreASessionOnce(t *testing.T) {
	st := slowStore{statestore.NewMemory(statestore.Options{})}
	ctx := context.Background()
	// What a crashed gateway leaves: a session recorded ready.
	rec := &statestore.Session{ID: "s1", Agent: "x", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{Store: st, IdleTimeout: -1})
	defer m.Close()
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := m.Get(ctx, "", "s1")
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Get of a session to restore: %v", err)
		}
	}
	events, err := decoded(t)(st.Events(ctx, "s1", 0, 0))
	if err != nil || len(events) != 1 || events[0].GetStateChanged().GetState() != "agent_lost" {
		t.Fatalf("log after the restore = %v, %v; want one agent_lost event", events, err)
	}
}

// sweepDuringRestore runs the orphan sweep while Get's restore of a session
// is between marking it lost and recording the state, where a sweep beside
// it once saw the session still live.
type sweepDuringRestore struct {
	*sharedMemory
	once  sync.Once
	sweep func()
}

func (s *sweepDuringRestore) SetState(ctx context.Context, id string, state statestore.State, detail string) error {
	s.once.Do(s.sweep)
	return s.sharedMemory.SetState(ctx, id, state, detail)
}

// TestSweepWaitsForARestore: the orphan sweep does not mark lost again a
// session this replica is restoring, nor release the lease the restore
// took.
func TestSweepWaitsForARestore(t *testing.T) {
	shared := newSharedMemory()
	st := &sweepDuringRestore{sharedMemory: shared}
	m := NewManager(Options{Store: st, Replica: "a", IdleTimeout: -1, LeaseTTL: time.Hour})
	defer m.Close()
	ctx := context.Background()
	rec := &statestore.Session{ID: "s1", Agent: "x", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	swept := make(chan struct{})
	st.sweep = func() {
		go func() {
			defer close(swept)
			m.sweepOrphans(ctx)
		}()
		// Give an unserialised sweep the time to run here; a serialised
		// one waits for the restore.
		select {
		case <-swept:
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := m.Get(ctx, "", "s1"); err != nil {
		t.Fatal(err)
	}
	<-swept
	events, err := decoded(t)(st.Events(ctx, "s1", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].GetStateChanged().GetState() != string(statestore.StateAgentLost) {
		t.Fatalf("events %v, want one agent_lost", events)
	}
	if h, _ := st.LeaseHolder(ctx, "s1"); h != "a" {
		t.Fatalf("lease held by %q after the sweep, want the restoring replica a", h)
	}
}
