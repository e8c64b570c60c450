package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// TestRestartStartsANewAgentSessionWhereNoneCanBeTakenBack: an agent that
// offers neither session/resume nor session/load (v1 without loadSession,
// v2 without capabilities.session) cannot take its side of a session back
// after a restart. The session says so, and the next prompt starts a new
// agent session in it, the log going on.
func TestRestartStartsANewAgentSessionWhereNoneCanBeTakenBack(t *testing.T) {
	t.Parallel()
	say := update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}`)
	turns := []agentsim.Turn{{Steps: []agentsim.Step{say}}}
	agents := map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: turns}),
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: turns}),
	}
	path := filepath.Join(t.TempDir(), "sessions.db")
	st := openBolt(t, path, statestore.Options{})
	g := startGateway(t, gatewayOpts{agents: agents, store: st})
	ids := map[string]string{"v1": g.create(t, "v1"), "v2": g.create(t, "v2")}
	firsts := map[string][]*acpv2.SessionEvent{}
	for name, id := range ids {
		firsts[name] = turn(t, g.connect, id, nil)
		if snap := snapshot(t, g, id); snap.GetAgentContextLost() {
			t.Fatalf("%s: agentContextLost set on a session whose agent runs", name)
		}
	}
	g.stop()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	g = startGateway(t, gatewayOpts{agents: agents, store: openBolt(t, path, statestore.Options{})})
	for name, id := range ids {
		t.Run(name, func(t *testing.T) {
			second := startsAfresh(t, g, id)
			if end := second[len(second)-1].GetTurnEnded(); end.GetError() != "" || end.GetStopReason() != "end_turn" {
				t.Fatalf("the turn after the restart ended with %v", end)
			}
			after := snapshot(t, g, id)
			if after.GetState() != "ready" || after.GetAgentContextLost() {
				t.Fatalf("after the new agent session: state %q, agentContextLost %v; want ready, unset", after.GetState(), after.GetAgentContextLost())
			}
			// One log: the first turn, the loss at shutdown, the new agent
			// session, the second turn.
			all := watchAll(t, g.connect, id, 0, int(after.GetLastSeq()))
			testutil.CheckSeqs(t, all, 1)
			first := firsts[name]
			if !eventsEqual(all[:len(first)], first) || !eventsEqual(all[len(all)-len(second):], second) {
				t.Fatal("the log differs from the turns' events")
			}
			if between := all[len(first) : len(all)-len(second)]; len(between) != 2 || between[0].GetStateChanged().GetState() != "agent_lost" {
				t.Fatalf("events between the turns %v, want agent_lost, then ready", between)
			}
		})
	}
}

// startsAfresh checks that session id, whose agent is gone and cannot
// take its side of the session back, says so, and that a prompt then
// starts a new agent session in it, as the log's next event says. It
// returns the prompt's events.
func startsAfresh(t *testing.T, g *gateway, id string) []*acpv2.SessionEvent {
	t.Helper()
	before := snapshot(t, g, id)
	if before.GetState() != "agent_lost" || !before.GetAgentContextLost() ||
		!strings.Contains(before.GetStateDetail(), "the next prompt starts a new agent session") {
		t.Fatalf("state %q (%s), agentContextLost %v; want agent_lost, saying what the next prompt does, and the flag",
			before.GetState(), before.GetStateDetail(), before.GetAgentContextLost())
	}
	events := turn(t, g.connect, id, nil)
	sc := watchAll(t, g.connect, id, before.GetLastSeq(), 1)[0].GetStateChanged()
	if sc.GetState() != "ready" || !strings.Contains(sc.GetDetail(), "new agent session") {
		t.Fatalf("the event after the loss %v, want ready, saying a new agent session started", sc)
	}
	return events
}

// TestShutdownEndsTheRunningTurn: a turn running when the gateway shuts
// down ends in the log before the gateway exits, saying why.
func TestShutdownEndsTheRunningTurn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sessions.db")
	st := openBolt(t, path, statestore.Options{})
	g := startGateway(t, gatewayOpts{store: st, agents: map[string][]string{
		"slow": agentCommand(t, agentsim.Script{Resume: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Sleep: agentsim.Duration(time.Minute)}}}}}),
	}})
	id := g.create(t, "slow")
	stream, err := g.connect.Prompt(context.Background(), connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Msg().GetEvent() == nil { // heartbeats first
		if !stream.Receive() {
			t.Fatalf("the turn's stream ended: %v", stream.Err())
		}
	}
	if stream.Msg().GetEvent().GetTurnStarted() == nil {
		t.Fatalf("the turn's first event %v, want turnStarted", stream.Msg())
	}
	g.stop()
	stored, err := st.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	events := storetest.Messages(t, stored)
	end := events[len(events)-1].GetTurnEnded()
	if end.GetStopReason() != "cancelled" || end.GetCause() != session.CauseGatewayShutdown || end.GetError() != "" {
		t.Fatalf("the log after the shutdown ends with %v, want the turn ended cancelled, cause %s", events[len(events)-1], session.CauseGatewayShutdown)
	}
}

// leftByCrash stores what a gateway killed during the turns of sessions
// leaves: records that say live (ready, unless state is given) and logs
// holding the events given, numbered from 1.
func leftByCrash(t *testing.T, st statestore.Store, id string, state statestore.State, events ...*acpv2.SessionEvent) {
	t.Helper()
	ctx := context.Background()
	if state == "" {
		state = statestore.StateReady
	}
	rec := &statestore.Session{ID: id, Agent: "v1", Cwd: t.TempDir(), State: state, CreatedAt: time.Now(), AgentSessionID: "agent-" + id, ProtocolVersion: 1}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for i, ev := range events {
		ev.Seq, ev.Time = uint64(i+1), timestamppb.Now()
	}
	if err := st.Append(ctx, id, storetest.Encode(t, events...), nil); err != nil {
		t.Fatal(err)
	}
}

func turnStarted() *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{Prompt: textPrompt("go")}}}
}

func chunk(text string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
		Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: text}}}}}}
}

func turnEnded() *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "end_turn"}}}
}

// TestRestartEndsTheTurnsACrashLeftRunning: the gateway that takes up the
// sessions of one that was killed ends, in their logs, the turns it left
// without an end; a turn that ended gets no second end.
func TestRestartEndsTheTurnsACrashLeftRunning(t *testing.T) {
	t.Parallel()
	const keep = 50
	st := statestore.NewMemory(statestore.Options{MaxEvents: keep})
	leftByCrash(t, st, "s_running", "", turnStarted(), turnEnded(), turnStarted(), chunk("half"))
	leftByCrash(t, st, "s_at_rest", "", turnStarted(), chunk("all"), turnEnded())
	// A turn whose start is pages back from the log's end, and one longer
	// than retention keeps: its start was dropped.
	paged := []*acpv2.SessionEvent{turnEnded(), turnStarted()}
	for range keep - 5 {
		paged = append(paged, chunk("more"))
	}
	leftByCrash(t, st, "s_paged", "", paged...)
	long := []*acpv2.SessionEvent{turnStarted()}
	for range 3 * keep {
		long = append(long, chunk("more"))
	}
	leftByCrash(t, st, "s_long", "", long...)
	// Recorded lost before the crash (its agent ended), the turn's end
	// still to be stored: ended when the session is next taken up.
	leftByCrash(t, st, "s_lost", statestore.StateAgentLost, turnStarted(), chunk("half"))
	g := startGateway(t, gatewayOpts{store: st, agents: map[string][]string{"v1": agentCommand(t, agentsim.Script{Resume: true})}})

	for id, n := range map[string]int{"s_running": 4, "s_paged": len(paged), "s_long": len(long)} {
		events := watchAll(t, g.connect, id, uint64(n), 2)
		if events[0].GetStateChanged().GetState() != "agent_lost" {
			t.Errorf("%s: first event after the crash %v, want the agent's loss", id, events[0])
		}
		if end := events[1].GetTurnEnded(); end.GetStopReason() != "cancelled" || end.GetCause() != session.CauseGatewayLost {
			t.Errorf("%s: second event after the crash %v, want the turn ended cancelled, cause %s", id, events[1], session.CauseGatewayLost)
		}
		if snap := snapshot(t, g, id); snap.GetLastSeq() != uint64(n+2) || snap.GetState() != "agent_lost" {
			t.Errorf("%s: last seq %d, state %q; want %d, agent_lost", id, snap.GetLastSeq(), snap.GetState(), n+2)
		}
	}
	if snap := snapshot(t, g, "s_at_rest"); snap.GetLastSeq() != 4 {
		t.Errorf("s_at_rest: last seq %d, want 4: the agent's loss alone after the turn's end", snap.GetLastSeq())
	}
	// Taken up by a request; its prompt then works as after any loss.
	if err := promptErr(g, "s_lost", "go"); err != nil {
		t.Fatalf("prompt to s_lost: %v", err)
	}
	events := watchAll(t, g.connect, "s_lost", 2, 2)
	if end := events[0].GetTurnEnded(); end.GetCause() != session.CauseGatewayLost {
		t.Errorf("s_lost: event after the crash %v, want the turn ended, cause %s", events[0], session.CauseGatewayLost)
	}
	if events[1].GetStateChanged().GetState() != "ready" {
		t.Errorf("s_lost: then %v, want the re-attach", events[1])
	}
}
