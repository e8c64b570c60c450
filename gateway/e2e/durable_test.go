package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/boltstore"
)

func openBolt(t *testing.T, path string, opts statestore.Options) statestore.Store {
	t.Helper()
	st, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func eventsEqual(a, b []*acpv2.SessionEvent) bool { return slices.EqualFunc(a, b, eventEqual) }

func toolCallsEqual(a, b []*acpv2.ToolCall) bool {
	return slices.EqualFunc(a, b, func(x, y *acpv2.ToolCall) bool { return proto.Equal(x, y) })
}

func TestSessionsSurviveAGatewayRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sessions.db")
	agents := map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Resume: true, Turns: []agentsim.Turn{v1Turn}}),
		// Offers no way back: after a restart a prompt starts a new agent
		// session (TestRestartStartsANewAgentSessionWhereNoneCanBeTakenBack).
		"once": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}}),
	}
	st := openBolt(t, path, statestore.Options{})
	g := startGateway(t, gatewayOpts{agents: agents, store: st})
	id := g.create(t, "v1")
	other := g.create(t, "once")
	first := turn(t, g.connect, id, nil)
	before := snapshot(t, g, id)
	g.stop()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	g = startGateway(t, gatewayOpts{agents: agents, store: openBolt(t, path, statestore.Options{})})
	list, err := g.connect.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if s := list.Msg.GetSessions(); len(s) != 2 || s[0].GetSessionId() != id || s[1].GetSessionId() != other {
		t.Fatalf("ListSessions after the restart = %v", s)
	}
	after := snapshot(t, g, id)
	if after.GetState() != "agent_lost" {
		t.Fatalf("state after the restart %q, want agent_lost", after.GetState())
	}
	if !toolCallsEqual(after.GetToolCalls(), before.GetToolCalls()) {
		t.Fatalf("tool calls after the restart differ:\n%v\n%v", after.GetToolCalls(), before.GetToolCalls())
	}
	// The log replays as it was, followed by the loss of the agent.
	replayed := watchAll(t, g.connect, id, 0, len(first)+1)
	if !eventsEqual(replayed[:len(first)], first) {
		t.Fatal("the log replayed after the restart differs from the turn's events")
	}
	if sc := replayed[len(first)].GetStateChanged(); sc.GetState() != "agent_lost" {
		t.Fatalf("event after the turn = %v, want the agent's loss", replayed[len(first)])
	}
	// A prompt re-attaches with session/resume and the log goes on.
	second := turn(t, g.connect, id, nil)
	if got, want := second[0].GetSeq(), uint64(len(first)+3); got != want {
		t.Fatalf("the next turn starts at seq %d, want %d (after the loss and the re-attach)", got, want)
	}
	if snap := snapshot(t, g, id); snap.GetState() != "ready" {
		t.Fatalf("state after the re-attach %q", snap.GetState())
	}
}

func TestRecoverMarksSessionsOfACrashedGateway(t *testing.T) {
	t.Parallel()
	// What a gateway killed with SIGKILL leaves: a session recorded ready.
	st := statestore.NewMemory(statestore.Options{})
	ctx := context.Background()
	rec := &statestore.Session{ID: "s_crashed", Agent: "v1", Cwd: t.TempDir(), State: statestore.StateReady, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayOpts{store: st, agents: map[string][]string{"v1": agentCommand(t, agentsim.Script{})}})
	snap := snapshot(t, g, "s_crashed")
	if snap.GetState() != "agent_lost" || snap.GetLastSeq() != 1 {
		t.Fatalf("session of the crashed gateway: state %q, last seq %d", snap.GetState(), snap.GetLastSeq())
	}
	ev := watchAll(t, g.connect, "s_crashed", 0, 1)[0]
	if ev.GetStateChanged().GetState() != "agent_lost" {
		t.Fatalf("first event %v, want the agent's loss", ev)
	}
}

func TestWatchFromTrimmedSeqStartsWithSnapshot(t *testing.T) {
	t.Parallel()
	const keep = 6
	g := startGateway(t, gatewayOpts{
		store:  statestore.NewMemory(statestore.Options{MaxEvents: keep}),
		agents: map[string][]string{"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}})},
	})
	id := g.create(t, "v1")
	events := turn(t, g.connect, id, nil)
	last := events[len(events)-1].GetSeq()
	if last <= keep+1 {
		t.Fatalf("the turn has only %d events: too few to trim", last)
	}
	for _, after := range []uint64{0, 1, last - keep - 1} {
		// The snapshot stands for every event up to the last: nothing
		// follows it until the session moves on.
		got := watchAll(t, g.connect, id, after, 1)
		snap := got[0].GetSnapshot()
		if snap == nil || got[0].GetSeq() != last || snap.GetLastSeq() != last {
			t.Fatalf("Watch(after %d) starts with %v, want a snapshot as of seq %d", after, got[0], last)
		}
		if !toolCallsEqual(snap.GetToolCalls(), snapshot(t, g, id).GetToolCalls()) {
			t.Fatalf("the snapshot's tool calls differ from GetSession's")
		}
	}
	// From a seq still kept, the events come as they were.
	got := watchAll(t, g.connect, id, last-keep, keep)
	if !eventsEqual(got, events[len(events)-keep:]) {
		t.Fatal("Watch from a kept seq differs from the turn's events")
	}
}

func TestEndedSessionsAreCapped(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{maxEnded: 2, agents: map[string][]string{"v1": agentCommand(t, agentsim.Script{})}})
	ctx := context.Background()
	var ids []string
	for i := 0; i < 4; i++ {
		id := g.create(t, "v1")
		ids = append(ids, id)
		if _, err := g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		_, err := g.connect.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
		if kept := i >= 2; kept != (err == nil) {
			t.Fatalf("session %d of 4 closed: GetSession err = %v, want kept=%v", i+1, err, kept)
		}
	}
}
