package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	acp "github.com/coder/acp-go-sdk"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// turnScript's one turn shows messages, a plan and a tool call's life.
var turnScript = agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"thinking"}}`),
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello "}}`),
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"world"}}`),
	update(`{"sessionUpdate":"plan","entries":[{"content":"Read a.go","priority":"high","status":"in_progress"}]}`),
	update(`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read a.go","kind":"read","status":"pending",` +
		`"locations":[{"path":"{{cwd}}/a.go","line":3}],"rawInput":{"path":"a.go"}}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}`),
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed",` +
		`"content":[{"type":"content","content":{"type":"text","text":"package a"}}],"rawOutput":{"bytes":9}}`),
}, StopReason: "end_turn"}}}

// permissionScript's turn asks permission to edit; the edit completes when
// allowed and fails when rejected.
var permissionScript = agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"tool_call","toolCallId":"c2","title":"Edit b.go","kind":"edit","status":"pending",` +
		`"content":[{"type":"diff","path":"{{cwd}}/b.go","oldText":"a","newText":"b"}]}`),
	{Permission: &agentsim.Permission{
		ToolCall: json.RawMessage(`{"toolCallId":"c2","title":"Edit b.go"}`),
		Allowed:  []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"completed"}`)},
		Rejected: []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"failed"}`)},
	}},
}}}}

// slowScript's turn says "working", then takes 30 s unless cancelled.
var slowScript = agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"working"}}`),
	sleep(30 * time.Second),
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"never"}}`),
}}}}

func TestInitializeV1AdvertisesWhatTheBridgeServes(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	res := e.initialize(t)
	if res.ProtocolVersion != 1 {
		t.Errorf("protocolVersion %d, want 1", res.ProtocolVersion)
	}
	if len(res.AuthMethods) != 0 {
		t.Errorf("authMethods %v, want none: the bridge authenticates itself", res.AuthMethods)
	}
	caps := res.AgentCapabilities
	if !caps.LoadSession {
		t.Error("loadSession not advertised")
	}
	if caps.PromptCapabilities.Image || caps.PromptCapabilities.Audio || caps.PromptCapabilities.EmbeddedContext {
		t.Errorf("prompt capabilities beyond the baseline: %+v", caps.PromptCapabilities)
	}
	if caps.SessionCapabilities.List == nil || caps.SessionCapabilities.Resume == nil || caps.SessionCapabilities.Close == nil {
		t.Errorf("session capabilities %+v lack list, resume or close", caps.SessionCapabilities)
	}
	if res.AgentInfo == nil || res.AgentInfo.Name != "acp-gateway" {
		t.Errorf("agentInfo %+v", res.AgentInfo)
	}
}

func TestPromptTurnReachesTheEditorInACPv1Shapes(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	sid := e.newSession(t)
	res, err := e.prompt(testCtx(t), sid, "read a.go")
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stopReason %q, want end_turn", res.StopReason)
	}
	// The SDK hands over every notification sent before the answer.
	updates, _ := e.rec.snapshot()
	if len(updates) != 7 {
		t.Fatalf("got %d updates, want 7: %+v", len(updates), updates)
	}
	if u := updates[0].AgentThoughtChunk; u == nil || u.Content.Text == nil || u.Content.Text.Text != "thinking" {
		t.Errorf("update 0 is not the thought: %+v", updates[0])
	}
	if got := texts(updates); !reflect.DeepEqual(got, []string{"Hello ", "world"}) {
		t.Errorf("message chunks %q", got)
	}
	if p := updates[3].Plan; p == nil || len(p.Entries) != 1 || p.Entries[0].Status != acp.PlanEntryStatusInProgress {
		t.Errorf("update 3 is not the plan: %+v", updates[3])
	}

	tc := updates[4].ToolCall
	if tc == nil {
		t.Fatalf("update 4 is not a tool_call: %+v", updates[4])
	}
	if tc.ToolCallId != "c1" || tc.Title != "Read a.go" || tc.Kind != acp.ToolKindRead || tc.Status != acp.ToolCallStatusPending {
		t.Errorf("tool_call %+v", tc)
	}
	if len(tc.Locations) != 1 || !strings.HasSuffix(tc.Locations[0].Path, "/a.go") || tc.Locations[0].Line == nil || *tc.Locations[0].Line != 3 {
		t.Errorf("tool_call locations %+v", tc.Locations)
	}
	if !reflect.DeepEqual(tc.RawInput, map[string]any{"path": "a.go"}) {
		t.Errorf("tool_call rawInput %v", tc.RawInput)
	}

	// The updates carry the patch, not the whole call again.
	running := updates[5].ToolCallUpdate
	if running == nil || running.ToolCallId != "c1" || running.Status == nil || *running.Status != acp.ToolCallStatusInProgress {
		t.Fatalf("update 5 is not c1 in progress: %+v", updates[5])
	}
	if running.Title != nil || running.Kind != nil || running.Content != nil || running.Locations != nil || running.RawInput != nil {
		t.Errorf("the in-progress update repeats unchanged fields: %+v", running)
	}
	done := updates[6].ToolCallUpdate
	if done == nil || done.Status == nil || *done.Status != acp.ToolCallStatusCompleted {
		t.Fatalf("update 6 is not c1 completed: %+v", updates[6])
	}
	if len(done.Content) != 1 || done.Content[0].Content == nil || done.Content[0].Content.Content.Text == nil ||
		done.Content[0].Content.Content.Text.Text != "package a" {
		t.Errorf("completed content %+v", done.Content)
	}
	if !reflect.DeepEqual(done.RawOutput, map[string]any{"bytes": float64(9)}) {
		t.Errorf("completed rawOutput %v", done.RawOutput)
	}
	if got := g.toolCall(t, sid, "c1").GetStatus(); got != "completed" {
		t.Errorf("the gateway has c1 %q", got)
	}
}

func TestPermissionAnswersReachTheGateway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		kind   acp.PermissionOptionKind
		status string
	}{
		{"allow", acp.PermissionOptionKindAllowOnce, "completed"},
		{"reject", acp.PermissionOptionKindRejectOnce, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, map[string]agentsim.Script{"sim": permissionScript})
			e := startEditor(t, bridgeOptions(g, "sim"), choose(tc.kind))
			e.initialize(t)
			sid := e.newSession(t)
			res, err := e.prompt(testCtx(t), sid, "edit b.go")
			if err != nil {
				t.Fatalf("session/prompt: %v", err)
			}
			if res.StopReason != acp.StopReasonEndTurn {
				t.Errorf("stopReason %q", res.StopReason)
			}
			updates, asks := e.rec.snapshot()
			if len(asks) != 1 {
				t.Fatalf("the editor was asked %d times, want once", len(asks))
			}
			ask := asks[0]
			if ask.SessionId != acp.SessionId(sid) || ask.ToolCall.ToolCallId != "c2" || ask.ToolCall.Title == nil || *ask.ToolCall.Title != "Edit b.go" {
				t.Errorf("request_permission %+v", ask)
			}
			var ids []string
			for _, o := range ask.Options {
				ids = append(ids, string(o.OptionId))
			}
			if !reflect.DeepEqual(ids, []string{"allow-once", "reject-once"}) {
				t.Errorf("options %v", ids)
			}
			if len(updates) != 2 || updates[0].ToolCall == nil || updates[1].ToolCallUpdate == nil {
				t.Fatalf("updates %+v, want the tool_call and its update", updates)
			}
			if c := updates[0].ToolCall.Content; len(c) != 1 || c[0].Diff == nil || c[0].Diff.NewText != "b" {
				t.Errorf("tool_call content %+v, want the diff", c)
			}
			if s := updates[1].ToolCallUpdate.Status; s == nil || string(*s) != tc.status {
				t.Errorf("tool_call_update status %v, want %s", s, tc.status)
			}
			if got := g.toolCall(t, sid, "c2").GetStatus(); got != tc.status {
				t.Errorf("the gateway has c2 %q, want %q", got, tc.status)
			}
		})
	}
}

func TestCancelMidTurnEndsItCancelled(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": slowScript})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	sid := e.newSession(t)
	type result struct {
		res acp.PromptResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.prompt(testCtx(t), sid, "take your time")
		done <- result{res, err}
	}()
	testutil.WaitFor(t, `"working"`, func() bool {
		updates, _ := e.rec.snapshot()
		return len(texts(updates)) > 0
	})
	if err := e.Cancel(testCtx(t), acp.CancelNotification{SessionId: acp.SessionId(sid)}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("session/prompt: %v", r.err)
		}
		if r.res.StopReason != acp.StopReasonCancelled {
			t.Errorf("stopReason %q, want cancelled", r.res.StopReason)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the cancelled turn did not end")
	}
	updates, _ := e.rec.snapshot()
	if got := texts(updates); !reflect.DeepEqual(got, []string{"working"}) {
		t.Errorf("message chunks %q", got)
	}
}

func TestCancelWithAPendingPermissionWithdrawsTheRequest(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": permissionScript})
	withdrawn := make(chan struct{})
	asked := make(chan struct{}, 1)
	e := startEditor(t, bridgeOptions(g, "sim"), func(ctx context.Context, _ acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		asked <- struct{}{}
		select {
		case <-ctx.Done(): // $/cancel_request
			close(withdrawn)
		case <-time.After(20 * time.Second):
		}
		return cancelledOutcome()
	})
	e.initialize(t)
	sid := e.newSession(t)
	done := make(chan acp.StopReason, 1)
	go func() {
		res, err := e.prompt(testCtx(t), sid, "edit b.go")
		if err != nil {
			t.Errorf("session/prompt: %v", err)
		}
		done <- res.StopReason
	}()
	select {
	case <-asked:
	case <-time.After(15 * time.Second):
		t.Fatal("no permission request reached the editor")
	}
	if err := e.Cancel(testCtx(t), acp.CancelNotification{SessionId: acp.SessionId(sid)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-withdrawn:
	case <-time.After(15 * time.Second):
		t.Fatal("the pending permission request was not withdrawn with $/cancel_request")
	}
	select {
	case reason := <-done:
		if reason != acp.StopReasonCancelled {
			t.Errorf("stopReason %q, want cancelled", reason)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the turn did not end")
	}
	if got := g.toolCall(t, sid, "c2").GetStatus(); got != "pending" {
		t.Errorf("the gateway has c2 %q, want it left pending", got)
	}
}

func TestCancelRightAfterPromptIsNotLost(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": slowScript})
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	r.until(isResponse(1))
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[]}}`)
	res := r.until(isResponse(2))
	sid, _ := res[len(res)-1]["result"].(map[string]any)["sessionId"].(string)
	// The cancel follows the prompt at once, before the gateway can have
	// started the turn.
	r.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"go"}]}}`)
	r.send(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"` + sid + `"}}`)
	msgs := r.until(isResponse(3))
	if got := msgs[len(msgs)-1]["result"]; !reflect.DeepEqual(got, js(`{"stopReason":"cancelled"}`)) {
		t.Errorf("the prompt's answer is %v, want stopReason cancelled", msgs[len(msgs)-1])
	}
}

func TestBadTokenIsAClearErrorOnSessionNew(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	for name, token := range map[string]string{"wrong token": "not-the-token", "no token": ""} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hc := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(hc.CloseIdleConnections)
			e := startEditor(t, bridge.Options{Client: bridge.NewClient(hc, g.base, token), Agent: "sim"}, nil)
			e.initialize(t)
			_, err := e.NewSession(testCtx(t), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
			var rerr *acp.RequestError
			if !errors.As(err, &rerr) {
				t.Fatalf("session/new: err = %v, want a JSON-RPC error", err)
			}
			if rerr.Code != -32603 {
				t.Errorf("code %d, want -32603", rerr.Code)
			}
			for _, want := range []string{"CreateSession", "unauthenticated", "--token"} {
				if !strings.Contains(rerr.Message, want) {
					t.Errorf("message %q does not name %q", rerr.Message, want)
				}
			}
			if data, _ := rerr.Data.(map[string]any); data["connectCode"] != "unauthenticated" {
				t.Errorf("data %v, want connectCode unauthenticated", rerr.Data)
			}
		})
	}
}

func TestClosingStdinClosesTheSessionsTheBridgeCreated(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	// A session someone else made, which the editor resumes.
	other, err := g.client.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	otherID := other.Msg.GetSessionId()

	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	first, second := e.newSession(t), e.newSession(t)
	if _, err := e.prompt(testCtx(t), first, "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ResumeSession(testCtx(t), acp.ResumeSessionRequest{SessionId: acp.SessionId(otherID), Cwd: "/"}); err != nil {
		t.Fatalf("session/resume: %v", err)
	}
	for _, id := range []string{first, second} {
		if state := g.snapshot(t, id).GetState(); state != "ready" {
			t.Fatalf("session %s is %q before the editor goes", id, state)
		}
	}

	e.in.Close()
	if err := e.wait(t); err != nil {
		t.Fatalf("Serve returned %v after its input closed, want nil", err)
	}
	for _, id := range []string{first, second} {
		if state := g.snapshot(t, id).GetState(); state != "closed" {
			t.Errorf("session %s is %q after the editor went, want closed", id, state)
		}
	}
	if state := g.snapshot(t, otherID).GetState(); state == "closed" {
		t.Error("the bridge closed a session it did not create")
	}
}

func TestKeepSessionsLeavesThemOpen(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	opts := bridgeOptions(g, "sim")
	opts.KeepSessions = true
	e := startEditor(t, opts, nil)
	e.initialize(t)
	sid := e.newSession(t)
	e.in.Close()
	if err := e.wait(t); err != nil {
		t.Fatal(err)
	}
	if state := g.snapshot(t, sid).GetState(); state != "ready" {
		t.Errorf("session is %q, want it kept", state)
	}
}

func TestLoadSessionReplaysTheGatewaysLog(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	// A turn played earlier, straight on the gateway.
	ctx := testCtx(t)
	created, err := g.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	sid := created.Msg.GetSessionId()
	stream, err := g.client.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: sid, Prompt: []*acpv2.ContentBlock{
		{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "remember me"}}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()

	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	if _, err := e.LoadSession(testCtx(t), acp.LoadSessionRequest{SessionId: acp.SessionId(sid), Cwd: "/", McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v", err)
	}
	updates, _ := e.rec.snapshot()
	if len(updates) != 8 {
		t.Fatalf("replayed %d updates, want 8 (the prompt and the turn's 7): %+v", len(updates), updates)
	}
	if u := updates[0].UserMessageChunk; u == nil || u.Content.Text == nil || u.Content.Text.Text != "remember me" {
		t.Errorf("the replay does not start with the user's prompt: %+v", updates[0])
	}
	if got := texts(updates); !reflect.DeepEqual(got, []string{"Hello ", "world"}) {
		t.Errorf("replayed message chunks %q", got)
	}
	if updates[5].ToolCall == nil || updates[6].ToolCallUpdate == nil || updates[7].ToolCallUpdate == nil {
		t.Errorf("the tool call is not replayed as tool_call and updates: %+v", updates[5:])
	}

	// The loaded session goes on through the bridge.
	if res, err := e.prompt(testCtx(t), sid, "again"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt after load: %v, %v", res, err)
	}
}

func TestV2AgentPatchesBecomeV1Updates(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": {ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		update(`{"sessionUpdate":"tool_call_update","toolCallId":"c3","title":"Run ls","kind":"execute","status":"in_progress",` +
			`"content":[{"type":"content","content":{"type":"text","text":"line 1"}}],"locations":[{"path":"/tmp/x"}],"rawInput":{"cmd":"ls"}}`),
		update(`{"sessionUpdate":"tool_call_update","toolCallId":"c3","title":null,"kind":null,"status":null,"content":null,"locations":null,"rawInput":null}`),
		update(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c3","content":{"type":"content","content":{"type":"text","text":"line 2"}}}`),
		update(`{"sessionUpdate":"agent_message","messageId":"m1","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]}`),
		update(`{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p1","entries":[{"content":"x","priority":"low","status":"pending"}]}}`),
		// v2's open enums meet v1's closed ones.
		update(`{"sessionUpdate":"tool_call_update","toolCallId":"c4","title":"Lint","kind":"_lint","status":"cancelled"}`),
		update(`{"sessionUpdate":"tool_call_update","toolCallId":"c4","status":"_waiting","title":"Lint again"}`),
	}, StopReason: "_paused"}}}})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	sid := e.newSession(t)
	// A custom stop reason is none of v1's: the turn just ended.
	if res, err := e.prompt(testCtx(t), sid, "go"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("session/prompt: %v, %v", res, err)
	}
	updates, _ := e.rec.snapshot()
	if len(updates) != 8 {
		t.Fatalf("got %d updates, want 8: %+v", len(updates), updates)
	}
	if tc := updates[0].ToolCall; tc == nil || tc.Title != "Run ls" || tc.Kind != acp.ToolKindExecute || len(tc.Content) != 1 || len(tc.Locations) != 1 {
		t.Errorf("the first update is not the whole tool_call: %+v", updates[0])
	}
	cleared := updates[1].ToolCallUpdate
	if cleared == nil {
		t.Fatalf("update 1 is no tool_call_update: %+v", updates[1])
	}
	if cleared.Title == nil || *cleared.Title != "" {
		t.Errorf("a cleared title is %v, want \"\"", cleared.Title)
	}
	if cleared.Kind == nil || *cleared.Kind != acp.ToolKindOther {
		t.Errorf("a cleared kind is %v, want the default other", cleared.Kind)
	}
	if cleared.Status == nil || *cleared.Status != acp.ToolCallStatusPending {
		t.Errorf("a cleared status is %v, want the default pending", cleared.Status)
	}
	if cleared.Content == nil || len(cleared.Content) != 0 || cleared.Locations == nil || len(cleared.Locations) != 0 {
		t.Errorf("cleared collections are %v and %v, want []", cleared.Content, cleared.Locations)
	}
	if cleared.RawInput != nil {
		t.Errorf("a cleared rawInput is %v, want it left out", cleared.RawInput)
	}
	chunk := updates[2].ToolCallUpdate
	if chunk == nil || chunk.Title != nil || chunk.Status != nil || len(chunk.Content) != 1 ||
		chunk.Content[0].Content == nil || chunk.Content[0].Content.Content.Text.Text != "line 2" {
		t.Errorf("the content chunk is not a tool_call_update of the whole content: %+v", updates[2])
	}
	for i, want := range []string{"A", "B"} {
		c := updates[3+i].AgentMessageChunk
		if c == nil || c.Content.Text == nil || c.Content.Text.Text != want || c.MessageId == nil || *c.MessageId != "m1" {
			t.Errorf("update %d: %+v, want the chunk %q of message m1", 3+i, updates[3+i], want)
		}
	}
	if p := updates[5].Plan; p == nil || len(p.Entries) != 1 || p.Entries[0].Content != "x" {
		t.Errorf("the v2 plan is not a v1 plan: %+v", updates[5])
	}
	if tc := updates[6].ToolCall; tc == nil || tc.Kind != acp.ToolKindOther || tc.Status != acp.ToolCallStatusFailed {
		t.Errorf("a custom kind and the status cancelled: %+v, want kind other and status failed", updates[6])
	}
	if u := updates[7].ToolCallUpdate; u == nil || u.Status != nil || u.Title == nil || *u.Title != "Lint again" {
		t.Errorf("a custom status: %+v, want it left out and the title sent", updates[7])
	}
}

func TestFailedTurnIsAJSONRPCError(t *testing.T) {
	t.Parallel()
	exit := 3
	g := startGateway(t, map[string]agentsim.Script{"sim": {Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"bye"}}`),
		{Exit: &exit},
	}}}}})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	sid := e.newSession(t)
	_, err := e.prompt(testCtx(t), sid, "crash")
	var rerr *acp.RequestError
	if !errors.As(err, &rerr) {
		t.Fatalf("session/prompt: err = %v, want a JSON-RPC error", err)
	}
	if !strings.Contains(rerr.Message, "turn failed") || !strings.Contains(rerr.Message, "status 3") {
		t.Errorf("message %q does not say the turn failed and why", rerr.Message)
	}
}

func TestModeAndConfigOptionAreRelayed(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": {
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","type":"select","currentValue":"fast",` +
			`"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
	}})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	sid := acp.SessionId(e.newSession(t))
	if _, err := e.SetSessionMode(testCtx(t), acp.SetSessionModeRequest{SessionId: sid, ModeId: "code"}); err != nil {
		t.Errorf("session/set_mode: %v", err)
	}
	res, err := e.SetSessionConfigOption(testCtx(t), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: sid, ConfigId: "model", Value: "smart"}})
	if err != nil {
		t.Fatalf("session/set_config_option: %v", err)
	}
	if len(res.ConfigOptions) != 1 || res.ConfigOptions[0].Select == nil || res.ConfigOptions[0].Select.Id != "model" {
		t.Errorf("configOptions %+v", res.ConfigOptions)
	}
	// An unknown session is the gateway's not_found.
	_, err = e.SetSessionMode(testCtx(t), acp.SetSessionModeRequest{SessionId: "nope", ModeId: "code"})
	var rerr *acp.RequestError
	if !errors.As(err, &rerr) || rerr.Code != -32002 || !strings.Contains(rerr.Message, "not_found") {
		t.Errorf("set_mode of an unknown session: %v, want resource-not-found", err)
	}
}

func TestSessionListShowsTheAgentsOpenSessions(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript, "other": turnScript})
	if _, err := g.client.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "other", Cwd: "/"})); err != nil {
		t.Fatal(err)
	}
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.initialize(t)
	kept, gone := e.newSession(t), e.newSession(t)
	if _, err := e.CloseSession(testCtx(t), acp.CloseSessionRequest{SessionId: acp.SessionId(gone)}); err != nil {
		t.Fatalf("session/close: %v", err)
	}
	if state := g.snapshot(t, gone).GetState(); state != "closed" {
		t.Errorf("session/close left the session %q", state)
	}
	res, err := e.ListSessions(testCtx(t), acp.ListSessionsRequest{})
	if err != nil {
		t.Fatalf("session/list: %v", err)
	}
	if len(res.Sessions) != 1 || string(res.Sessions[0].SessionId) != kept {
		t.Errorf("sessions %+v, want only %s", res.Sessions, kept)
	}
}

func TestUnreachableGatewayIsAClearError(t *testing.T) {
	t.Parallel()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	// Port 1 on the loopback interface: nothing listens there.
	e := startEditor(t, bridge.Options{Client: bridge.NewClient(hc, "http://127.0.0.1:1", testToken), Agent: "sim"}, nil)
	e.initialize(t)
	_, err := e.NewSession(testCtx(t), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	var rerr *acp.RequestError
	if !errors.As(err, &rerr) {
		t.Fatalf("session/new: err = %v, want a JSON-RPC error", err)
	}
	for _, want := range []string{"CreateSession", "unavailable", "gateway"} {
		if !strings.Contains(rerr.Message, want) {
			t.Errorf("message %q does not name %q", rerr.Message, want)
		}
	}
}

// A turn whose Prompt stream the gateway cuts off because the bridge fell
// too far behind (a flood past --watch-buffer) is followed on in the
// session's log with Watch: the editor gets every update once, in order,
// and the turn's answer. (The cut-off was the editor's error, and the rest
// of the turn was lost to it.)
func TestCutOffTurnIsFollowedInTheLog(t *testing.T) {
	t.Parallel()
	const n = 3000
	flood := agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Flood: &agentsim.Flood{
		Count: n, Update: []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{{n}}"}}`)}}}}}}
	g := startGateway(t, map[string]agentsim.Script{"sim": flood}, func(c *app.Config) {
		c.Session.WatchBuffer = 16
	})
	e := startEditor(t, bridgeOptions(g, "sim"), nil)
	e.countedTurn(t, n)
}
