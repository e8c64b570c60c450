package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// v1Turn plays v1 creation, v1 null (unchanged), content replacement and a
// re-sent tool_call for a known id.
var v1Turn = agentsim.Turn{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Reading"}}`),
	update(`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read config","kind":"read","status":"pending","locations":[{"path":"{{cwd}}/a.json","line":3}]}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","title":null,"content":[{"type":"content","content":{"type":"text","text":"half"}}]}`),
	update(`{"sessionUpdate":"plan","entries":[{"content":"read","priority":"high","status":"completed"}]}`),
	update(`{"sessionUpdate":"tool_call","toolCallId":"c2","title":"Edit","kind":"_custom_kind","status":"pending"}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","locations":[],"rawOutput":{"n":1}}`),
	update(`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read config again"}`),
	update(`{"sessionUpdate":"_vendor_telemetry","tokens":12}`),
	update(`{"sessionUpdate":"tool_call_update","title":"an update without its id"}`),
}}

// v2Turn plays the v2 upsert with clears and content chunks.
var v2Turn = agentsim.Turn{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","title":"Run tests","kind":"execute","status":"in_progress","rawInput":{"cmd":"go test"}}`),
	update(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"t1","content":{"type":"content","content":{"type":"text","text":"ok pkg/a\n"}}}`),
	update(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"t1","content":{"type":"_progress","pct":50}}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","content":[{"type":"terminal","terminalId":"term1"}]}`),
	update(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"t1","content":{"type":"content","content":{"type":"text","text":"after replace"}}}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","rawInput":null,"title":null,"status":"completed"}`),
	update(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"t2","content":{"type":"diff","path":"/w/x","newText":"y"}}`),
}, StopReason: "max_tokens"} // sent in the idle state_update that ends a v2 turn

func snapshot(t *testing.T, g *gateway, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := g.connect.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	return res.Msg.GetSession()
}

func TestV1TurnMergesIntoSnapshots(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}}),
	}})
	id := g.create(t, "v1")
	events := turn(t, g.connect, id, nil)
	testutil.CheckSeqs(t, events, 1)
	if events[0].GetTurnStarted() == nil {
		t.Fatalf("first event %v, want turn_started", events[0])
	}
	if r := events[len(events)-1].GetTurnEnded(); r.GetStopReason() != "end_turn" || r.GetReason() != acpv2.StopReason_STOP_REASON_END_TURN {
		t.Fatalf("turn_ended = %v", r)
	}
	snap := snapshot(t, g, id)
	testutil.CheckReplay(t, events, snap.GetToolCalls())

	c1, c2 := snap.GetToolCalls()[0], snap.GetToolCalls()[1]
	if c1.GetToolCallId() != "c1" || c2.GetToolCallId() != "c2" {
		t.Fatalf("snapshot not in first-seen order: %v", snap.GetToolCalls())
	}
	// v1: null title left it unchanged; [] cleared the locations; the
	// re-sent tool_call patched the title and kept the rest.
	if c1.GetTitle() != "Read config again" || c1.GetStatus() != "completed" || len(c1.GetLocations()) != 0 ||
		len(c1.GetContent()) != 1 || c1.GetRawOutput().GetStructValue().GetFields()["n"].GetNumberValue() != 1 {
		t.Fatalf("c1 = %v", c1)
	}
	if c2.GetKind() != "_custom_kind" {
		t.Fatalf("custom kind not kept: %v", c2)
	}
	var plan, unknown, kept bool
	for _, ev := range events {
		plan = plan || ev.GetPlan() != nil
		unknown = unknown || ev.GetUnknown().GetSessionUpdate() == "_vendor_telemetry"
		kept = kept || ev.GetUnknown().GetBody().GetFields()["title"].GetStringValue() == "an update without its id"
	}
	if !plan || !unknown || !kept {
		t.Fatalf("plan forwarded %v, unknown update forwarded %v, malformed update kept %v", plan, unknown, kept)
	}
	if snap.GetLastSeq() != events[len(events)-1].GetSeq() {
		t.Fatalf("snapshot last seq %d, last event %d", snap.GetLastSeq(), events[len(events)-1].GetSeq())
	}
}

func TestV2TurnWithChunksAndClears(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	id := g.create(t, "v2")
	events := turn(t, g.connect, id, nil)
	testutil.CheckSeqs(t, events, 1)
	snap := snapshot(t, g, id)
	testutil.CheckReplay(t, events, snap.GetToolCalls())
	t1 := snap.GetToolCalls()[0]
	if t1.GetTitle() != "" || t1.GetRawInput() != nil || t1.GetStatus() != "completed" {
		t.Fatalf("v2 null did not clear: %v", t1)
	}
	if len(t1.GetContent()) != 2 || t1.GetContent()[0].GetTerminal().GetTerminalId() != "term1" ||
		t1.GetContent()[1].GetContent().GetText().GetText() != "after replace" {
		t.Fatalf("content replacement then append: %v", t1.GetContent())
	}
	if t2 := snap.GetToolCalls()[1]; t2.GetToolCallId() != "t2" || t2.GetContent()[0].GetDiff().GetNewText() != "y" {
		t.Fatalf("a chunk for an unseen id did not create it: %v", t2)
	}
	// The delta event keeps the three states of the patch.
	var cleared bool
	for _, ev := range events {
		if u := ev.GetToolCallUpdate(); u != nil && u.GetRawInput() != nil && u.GetRawInput().GetValue() == nil {
			cleared = u.GetTitle() != nil && u.GetTitle().GetOp() != nil && u.GetKind() == nil
		}
	}
	if !cleared {
		t.Fatal("the clear patch did not reach the client as a clear (omitted kind, cleared title and rawInput)")
	}
	// A v2 turn ends at its idle state_update, with the stop reason there.
	n := len(events)
	if idle := events[n-2].GetStateUpdate(); idle.GetState() != "idle" || idle.GetStopReason() != "max_tokens" {
		t.Fatalf("event before turn_ended = %v, want the idle state_update", events[n-2])
	}
	if end := events[n-1].GetTurnEnded(); end.GetStopReason() != "max_tokens" || end.GetReason() != acpv2.StopReason_STOP_REASON_MAX_TOKENS {
		t.Fatalf("turn_ended = %v, want max_tokens from the idle state_update", end)
	}
}

// A stream asked for deltas only carries every event but the merged tool
// calls, in order, and the deltas it carries rebuild the session's tool
// calls; a stream that does not ask has the merged calls.
func TestDeltasOnlyStreams(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := g.create(t, "v2")
	deltas, err := testutil.Turn(ctx, g.connect, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go"), DeltasOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := watchAll(t, g.connect, id, 0, int(deltas[len(deltas)-1].GetSeq()))
	var want []*acpv2.SessionEvent
	for _, ev := range all {
		if ev.GetToolCall() == nil {
			want = append(want, ev)
		}
	}
	if len(want) == len(all) {
		t.Fatal("the full stream has no merged tool calls to leave out")
	}
	if !slices.EqualFunc(deltas, want, eventEqual) {
		t.Fatalf("deltas-only Prompt stream:\n %v\nwant the log without merged calls:\n %v", deltas, want)
	}
	// Watch too, from the start.
	stream, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, DeltasOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	var watched []*acpv2.SessionEvent
	for len(watched) < len(want) && stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			watched = append(watched, ev)
		}
	}
	cancel()
	stream.Close()
	if !slices.EqualFunc(watched, want, eventEqual) {
		t.Fatalf("deltas-only Watch stream:\n %v\nwant\n %v", watched, want)
	}
	// The client that applies the deltas has the gateway's tool calls.
	mine := merge.New()
	for _, ev := range deltas {
		if _, err := testutil.ApplyDelta(mine, ev); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := mine.Snapshot(), snapshot(t, g, id).GetToolCalls(); !slices.EqualFunc(got, want, func(a, b *acpv2.ToolCall) bool { return proto.Equal(a, b) }) {
		t.Fatalf("the deltas rebuild\n %v\nthe gateway has\n %v", got, want)
	}
}

func TestEveryProtocolStreamsATurn(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	var reference []*acpv2.SessionEvent
	for name, c := range g.clients {
		t.Run(name, func(t *testing.T) {
			id := g.create(t, "v2")
			events := turn(t, c, id, nil)
			testutil.CheckSeqs(t, events, 1)
			for _, ev := range events {
				ev.Time = nil
			}
			if reference == nil {
				reference = events
				return
			}
			if len(events) != len(reference) {
				t.Fatalf("%d events, other protocol %d", len(events), len(reference))
			}
			for i := range events {
				if !proto.Equal(events[i], reference[i]) {
					t.Fatalf("event %d differs across protocols: %v vs %v", i, events[i], reference[i])
				}
			}
		})
	}
}

func TestWatchResumeFromEverySeq(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	id := g.create(t, "v2")

	// Two watchers live from the start see the same sequence as the turn.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct{ events []*acpv2.SessionEvent }
	results := make(chan result, 2)
	for range 2 {
		ctx, cancel := context.WithCancel(ctx)
		stream, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			var evs []*acpv2.SessionEvent
			for stream.Receive() {
				if ev := stream.Msg().GetEvent(); ev != nil {
					evs = append(evs, ev)
					if ev.GetTurnEnded() != nil {
						break
					}
				}
			}
			cancel()
			stream.Close()
			results <- result{evs}
		}()
	}
	live := turn(t, g.connect, id, nil)
	for range 2 {
		r := <-results
		if !slices.EqualFunc(r.events, live, eventEqual) {
			t.Fatalf("a live watcher saw %d events, the prompt stream %d", len(r.events), len(live))
		}
	}
	for after := range uint64(len(live)) {
		got := watchAll(t, g.connect, id, after, len(live)-int(after))
		if !slices.EqualFunc(got, live[after:], eventEqual) {
			t.Fatalf("Watch(afterSeq %d) does not reproduce the live stream", after)
		}
	}
}

func TestFilesConfinedToCwd(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []agentsim.Step{
		{WriteFile: &agentsim.WriteFile{Path: "{{cwd}}/sub/new.txt", Content: "hello"}},
		{ReadFile: "{{cwd}}/sub/new.txt"},
		{ReadFile: "{{cwd}}/../" + filepath.Base(outside) + "/secret"},
		{ReadFile: filepath.Join(outside, "secret")},
		{ReadFile: "{{cwd}}/escape/secret"},
		{WriteFile: &agentsim.WriteFile{Path: "{{cwd}}/escape/planted", Content: "x"}},
		{ReadFile: "relative.txt"},
	}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"fs": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: steps}}}),
	}})
	res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "fs", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()
	cwd := snapshot(t, g, id).GetCwd()
	if err := os.Symlink(outside, filepath.Join(cwd, "escape")); err != nil {
		t.Fatal(err)
	}
	events := turn(t, g.connect, id, nil)
	var reports []string
	for _, ev := range events {
		if c := ev.GetAgentMessageChunk(); c != nil {
			reports = append(reports, c.GetContent().GetText().GetText())
		}
	}
	if len(reports) != len(steps) {
		t.Fatalf("reports %q", reports)
	}
	if !strings.HasPrefix(reports[0], "wrote ") || !strings.HasSuffix(reports[1], ": hello") {
		t.Fatalf("inside cwd: %q", reports[:2])
	}
	for _, r := range reports[2:] {
		if strings.Contains(r, "s3cret") || !strings.Contains(r, ": ") || strings.HasPrefix(r, "wrote") {
			t.Fatalf("an escape was not refused: %q", r)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a write through a symlink escaped the cwd")
	}
}

func TestHeartbeatsOnIdleStreams(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{heartbeat: 50 * time.Millisecond, agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	id := g.create(t, "v2")
	stream, cancel := openWatch(t, g.connect, id)
	defer cancel()
	beats := 0
	for beats < 3 && stream.Receive() {
		if stream.Msg().GetHeartbeat() != nil && stream.Msg().GetEvent() == nil {
			beats++
		}
	}
	if beats < 3 {
		t.Fatalf("got %d heartbeats: %v", beats, stream.Err())
	}
	if got := stream.ResponseHeader().Get("X-Accel-Buffering"); got != "no" {
		t.Fatalf("X-Accel-Buffering = %q", got)
	}
}

func TestWatchOpensOnAnIdleSession(t *testing.T) {
	t.Parallel()
	// With heartbeats a minute apart, the stream must still open at once.
	g := startGateway(t, gatewayOpts{heartbeat: time.Minute, agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2Turn}}),
	}})
	id := g.create(t, "v2")
	stream, cancel := openWatch(t, g.connect, id)
	defer cancel()
	if !stream.Receive() || stream.Msg().GetHeartbeat() == nil {
		t.Fatalf("no opening heartbeat: %v", stream.Err())
	}
}

func eventEqual(a, b *acpv2.SessionEvent) bool { return proto.Equal(a, b) }

// TestToolCallsKeepMergingAcrossTurns: between turns a session keeps its
// tool calls compacted (each Snapshot decodes them afresh), and the next
// turn's updates merge onto them as if they had never been.
func TestToolCallsKeepMergingAcrossTurns(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"two": agentCommand(t, agentsim.Script{Turns: []agentsim.Turn{
			{Steps: []agentsim.Step{update(`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Edit","kind":"edit","status":"in_progress","rawInput":{"path":"a.go","n":[1,2]}}`)}},
			{Steps: []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}`)}},
		}}),
	}})
	id := g.create(t, "two")
	turn(t, g.connect, id, nil)
	s, err := g.mgr.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	first, second := s.Snapshot().GetToolCalls(), s.Snapshot().GetToolCalls()
	if len(first) != 1 || first[0].GetTitle() != "Edit" || first[0].GetRawInput().GetStructValue().GetFields()["path"].GetStringValue() != "a.go" {
		t.Fatalf("after the first turn the tool calls are %v", first)
	}
	if first[0] == second[0] {
		t.Error("the idle session's tool calls are not compacted: two Snapshots share a message")
	}
	turn(t, g.connect, id, nil)
	calls := s.Snapshot().GetToolCalls()
	want := &acpv2.ToolCall{ToolCallId: "c1", Title: "Edit", Kind: "edit", Status: "completed", RawInput: first[0].GetRawInput()}
	if len(calls) != 1 || !proto.Equal(calls[0], want) {
		t.Fatalf("after the second turn the tool calls are %v, want %v", calls, want)
	}
}
