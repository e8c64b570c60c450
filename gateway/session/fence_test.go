package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
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
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	st := &flakyLeases{sharedMemory: &sharedMemory{Memory: statestore.NewMemory(statestore.Options{}), leases: map[string]string{}}}
	m := NewManager(Options{Store: st, Replica: "a", IdleTimeout: -1, LeaseTTL: 600 * time.Millisecond,
		Agents: map[string][]string{"sim": cmd}})
	defer m.Close()
	ctx := context.Background()
	s, err := m.Create(ctx, "", "sim", t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	a := s.agent
	s.mu.Unlock()
	fenced := func(action string) float64 {
		return testutil.MetricSum(t, m.opts.Metrics.Registry(), "acp_gateway_agents_fenced_total", "action="+action)
	}

	st.fail.Store(true)
	testutil.WaitFor(t, "the agent to be frozen", a.Frozen)
	if err := s.reattach(ctx); err != nil {
		t.Fatalf("reattach with the agent there: %v", err)
	}
	st.fail.Store(false)
	testutil.WaitFor(t, "the agent to be thawed", func() bool { return !a.Frozen() })
	if a.Err() != nil || fenced("freeze") != 1 || fenced("thaw") != 1 {
		t.Fatalf("after the thaw: agent %v, frozen %v times, thawed %v", a.Err(), fenced("freeze"), fenced("thaw"))
	}

	st.fail.Store(true)
	testutil.WaitFor(t, "the agent to be frozen again", a.Frozen)
	// Another replica took the session over meanwhile and wrote to its log.
	rec, err := st.GetSession(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	ev := stateEvent(statestore.StateAgentLost, detailGatewayGone)
	ev.Seq, ev.Time = rec.LastSeq+1, timestamppb.Now()
	if err := st.Append(ctx, s.ID(), []*acpv2.SessionEvent{ev}, nil, nil); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(false)
	testutil.WaitFor(t, "the session to be let go", func() bool { return m.local(s.ID()) == nil })
	<-a.Done()
	if r := a.Reason(); r != agent.ReasonStopped && r != agent.ReasonKilled {
		t.Errorf("the agent ended %q", r)
	}
	if fenced("kill") != 1 {
		t.Errorf("killed %v times, want 1", fenced("kill"))
	}
}
