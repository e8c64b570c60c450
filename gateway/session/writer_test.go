package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// heldState is a store whose SetState waits until release is closed.
type heldState struct {
	statestore.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldState) SetState(ctx context.Context, id string, state statestore.State, detail string) error {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return h.Store.SetState(ctx, id, state, detail)
}

// A change of the session's state is recorded by the session's writer, not
// under its lock: while the store takes its time, the session is read as
// ever. (The state was written with the lock held, so that during an
// outage GetSession waited up to LeaseTTL/3 on every state change.)
func TestStateChangesDoNotHoldTheSessionLock(t *testing.T) {
	t.Parallel()
	st := &heldState{Store: statestore.NewMemory(statestore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	s := testSessionOf(t, Options{Store: st})
	defer s.m.Close()
	go s.setState(statestore.StateAgentLost, "the agent exited")
	<-st.entered // the store call has begun
	read := make(chan string)
	go func() { read <- s.Snapshot().GetState() }()
	select {
	case state := <-read:
		if state != string(statestore.StateAgentLost) {
			t.Errorf("snapshot state = %q, want agent_lost", state)
		}
	case <-time.After(10 * time.Second):
		t.Error("Snapshot waited on the store's SetState")
	}
	close(st.release)
	stored(t, s)
	if rec, err := st.GetSession(context.Background(), s.rec.ID); err != nil || rec.State != statestore.StateAgentLost {
		t.Fatalf("stored record = %+v, %v; want state agent_lost", rec, err)
	}
}

// orderStore records the order of the appends' state-change events and of
// the SetState calls.
type orderStore struct {
	statestore.Store
	mu    sync.Mutex
	calls []string
}

func (o *orderStore) Append(ctx context.Context, id string, events []*encoded.Event, changed []statestore.Call) error {
	err := o.Store.Append(ctx, id, events, changed)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range events {
		ev, _ := e.Message()
		if sc := ev.GetStateChanged(); sc != nil {
			o.calls = append(o.calls, "event "+sc.GetState())
		}
	}
	return err
}

func (o *orderStore) SetState(ctx context.Context, id string, state statestore.State, detail string) error {
	o.mu.Lock()
	o.calls = append(o.calls, "state "+string(state))
	o.mu.Unlock()
	return o.Store.SetState(ctx, id, state, detail)
}

// A closed session is read from the store, so its closed event is stored
// before the record says it is closed: a reader never finds a closed
// session whose log lacks its end.
func TestClosedEventIsStoredBeforeTheClosedState(t *testing.T) {
	t.Parallel()
	st := &orderStore{Store: statestore.NewMemory(statestore.Options{})}
	s := testSessionOf(t, Options{Store: st})
	defer s.m.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.calls) != 2 || st.calls[0] != "event closed" || st.calls[1] != "state closed" {
		t.Fatalf("store calls = %q, want the closed event, then the closed state", st.calls)
	}
}

// failingAppends is a store whose appends fail, counting them.
type failingAppends struct {
	statestore.Store
	mu    sync.Mutex
	tries int
}

var errOutage = errors.New("the store is out of reach")

func (f *failingAppends) Append(context.Context, string, []*encoded.Event, []statestore.Call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	return errOutage
}

func (f *failingAppends) appends() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries
}

// A session another replica took over lets go of the events it could not
// store: its writer stops at once, even between two tries, and the events
// are counted as not stored. (It slept out its pause, up to 2 s, and they
// were not counted.) The writer's pauses pass on the fake clock of a
// synctest bubble.
func TestEventsLetGoWhenTheSessionMovesAreCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testEventsLetGoWhenTheSessionMovesAreCounted)
}

func testEventsLetGoWhenTheSessionMovesAreCounted(t *testing.T) {
	st := &failingAppends{Store: statestore.NewMemory(statestore.Options{})}
	met := metrics.New(metrics.Options{MaxSessionSeries: -1})
	s := testSessionOf(t, Options{Store: st, Metrics: met})
	defer s.m.Close()
	const n = 3
	for range n {
		s.mu.Lock()
		err := s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateReady, "")}, nil)
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Past the seventh failure the writer pauses 2 s between tries. The
	// clock is let run, a first pause at a time, until it has made eight;
	// then the writer is in its pause, which has (at least 2 s less one
	// first pause) to go.
	for st.appends() < 8 {
		time.Sleep(firstRetry)
	}
	synctest.Wait()
	evicted := make(chan struct{})
	go func() {
		s.evict() // returns once the writer stopped
		close(evicted)
	}()
	select {
	case <-evicted:
	case <-time.After(time.Second):
		t.Fatal("the writer of a session that moved slept out its pause")
	}
	if got := testutil.MetricSum(t, met.Registry(), "acp_gateway_events_not_stored_total"); got != n {
		t.Fatalf("events not stored = %v, want %d", got, n)
	}
}

// Events the store can never take (one does not encode: its text is not
// UTF-8) end the session's wait at once, counted, rather than being tried
// for StoreOutageTimeout as if the store were out of reach.
func TestEventsTheStoreRefusesAreNotRetried(t *testing.T) {
	t.Parallel()
	met := metrics.New(metrics.Options{MaxSessionSeries: -1})
	s := testSessionOf(t, Options{Metrics: met})
	defer s.m.Close()
	bad := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
		Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "\xff"}}}}}}
	s.mu.Lock()
	err := s.emitLocked([]*acpv2.SessionEvent{bad}, nil)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.flush(ctx); !errors.Is(err, statestore.ErrInvalid) {
		t.Fatalf("flush = %v, want the store's ErrInvalid", err)
	}
	if got := testutil.MetricSum(t, met.Registry(), "acp_gateway_events_not_stored_total"); got != 1 {
		t.Fatalf("events not stored = %v, want 1", got)
	}
}
