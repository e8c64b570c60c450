package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// flakyLeases is a shared store whose lease calls fail while fail is set.
type flakyLeases struct {
	*sharedMemory
	fail atomic.Bool
}

func (f *flakyLeases) AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) error {
	if f.fail.Load() {
		return errors.New("the store is out of reach")
	}
	return f.sharedMemory.AcquireLease(ctx, id, holder, ttl)
}

// A session whose lease renewals fail has its agent frozen; a renewal that
// succeeds thaws it while the log is the replica's own, and kills it, the
// session let go, once another replica wrote to the log.
func TestFenceFreezesThawsAndKills(t *testing.T) {
	st := &flakyLeases{sharedMemory: newSharedMemory()}
	m, s, a, clock := startFenced(t, st)
	ctx := context.Background()
	fenced := func(action string) float64 {
		return testutil.MetricSum(t, m.opts.Metrics.Registry(), "acp_gateway_agents_fenced_total", "action="+action)
	}

	st.fail.Store(true)
	clock.Advance(fenceTTL) // past the fence; the renewal fails
	testutil.WaitFor(t, "the agent to be frozen", a.Frozen)
	if err := s.reattach(ctx); err != nil {
		t.Fatalf("reattach with the agent there: %v", err)
	}
	st.fail.Store(false)
	clock.Advance(fenceTTL / 3) // the next renewal
	testutil.WaitFor(t, "the agent to be thawed", func() bool { return !a.Frozen() })
	if a.Err() != nil || fenced("freeze") != 1 || fenced("thaw") != 1 {
		t.Fatalf("after the thaw: agent %v, frozen %v times, thawed %v", a.Err(), fenced("freeze"), fenced("thaw"))
	}

	st.fail.Store(true)
	clock.Advance(fenceTTL)
	testutil.WaitFor(t, "the agent to be frozen again", a.Frozen)
	// Another replica took the session over meanwhile and wrote to its log.
	takeOver(t, st.Memory, s.ID())
	st.fail.Store(false)
	clock.Advance(fenceTTL / 3)
	testutil.WaitFor(t, "the session to be let go", func() bool { return m.local(s.ID()) == nil })
	<-a.Done()
	if r := a.Reason(); r != agent.ReasonStopped && r != agent.ReasonKilled {
		t.Errorf("the agent ended %q", r)
	}
	if fenced("kill") != 1 {
		t.Errorf("killed %v times, want 1", fenced("kill"))
	}
}

// flakyStore is flakyLeases whose appends fail too while failAppends is
// set, so that a replica holds events it numbered and did not store.
type flakyStore struct {
	*flakyLeases
	failAppends atomic.Bool
}

func (f *flakyStore) Append(ctx context.Context, id string, events []*encoded.Event, changed []statestore.Call) error {
	if f.failAppends.Load() {
		return errors.New("the store is out of reach")
	}
	return f.flakyLeases.Append(ctx, id, events, changed)
}

// A frozen agent is not thawed when another replica wrote to the log at a
// seq this replica numbered but did not store: the log is not this
// replica's any more, though it is no longer than what it numbered.
func TestFenceKillsWhenTheLogForkedBelowWhatWasNumbered(t *testing.T) {
	st := &flakyStore{flakyLeases: &flakyLeases{sharedMemory: newSharedMemory()}}
	m, s, a, clock := startFenced(t, st)
	stored(t, s)

	// Three events numbered, none stored; then the lease calls fail too.
	st.failAppends.Store(true)
	for range 3 {
		s.mu.Lock()
		err := s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateReady, "")}, nil)
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	st.fail.Store(true)
	clock.Advance(fenceTTL)
	testutil.WaitFor(t, "the agent to be frozen", a.Frozen)
	// Another replica took the session over and wrote one event.
	takeOver(t, st.Memory, s.ID())
	st.fail.Store(false) // leases answer again; appends still fail
	clock.Advance(fenceTTL / 3)
	testutil.WaitFor(t, "the session to be let go", func() bool { return m.local(s.ID()) == nil })
	<-a.Done()
	if n := testutil.MetricSum(t, m.opts.Metrics.Registry(), "acp_gateway_agents_fenced_total", "action=thaw"); n != 0 {
		t.Errorf("the agent was thawed %v times", n)
	}
}

// fenceTTL is the lease TTL of startFenced's manager, on its fake clock.
// Moved fenceTTL on, the clock is past the fence of the last lease call
// that succeeded (its upkeep renewed no lease meanwhile: the store
// failed); moved fenceTTL/3 on, it is at the upkeep's next renewal.
const fenceTTL = time.Minute

// startFenced starts, as replica "a" of store st with a lease of fenceTTL
// on a fake clock, a session running the simulated agent, and returns it
// with its manager (closed as the test ends), its agent and the clock.
// The lease upkeep and the fence run only as the test moves the clock.
func startFenced(t *testing.T, st statestore.Store) (*Manager, *Session, *agent.Agent, *clockwork.FakeClock) {
	t.Helper()
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir() // removed after the manager is closed
	clock := clockwork.NewFakeClock()
	m := NewManager(Options{Store: st, Replica: "a", IdleTimeout: -1, LeaseTTL: fenceTTL, Clock: clock,
		Agents: map[string][]string{"sim": cmd}})
	t.Cleanup(m.Close)
	s, err := m.Create(context.Background(), "", "sim", cwd, "")
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return m, s, s.agent, clock
}

// takeOver writes to session id's log what another replica that took it
// over writes first: that its agent was lost.
func takeOver(t *testing.T, st *statestore.Memory, id string) {
	t.Helper()
	ctx := context.Background()
	rec, err := st.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ev := stateEvent(statestore.StateAgentLost, detailGatewayGone)
	ev.Seq, ev.Time = rec.LastSeq+1, timestamppb.Now()
	if err := st.Append(ctx, id, storetest.Encode(t, ev), nil); err != nil {
		t.Fatal(err)
	}
}
