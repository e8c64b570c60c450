package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// permissionTurn asks permission for a tool call it has not reported yet,
// then reports it according to the answer.
var permissionTurn = agentsim.Turn{Steps: []agentsim.Step{
	{Permission: &agentsim.Permission{
		ToolCall: raw(`{"toolCallId":"e1","title":"Edit main.go","kind":"edit"}`),
		Allowed:  []agentsim.Step{update(`{"sessionUpdate":"tool_call","toolCallId":"e1","title":"Edit main.go","status":"completed"}`)},
		Rejected: []agentsim.Step{update(`{"sessionUpdate":"tool_call","toolCallId":"e1","title":"Edit main.go","status":"failed"}`)},
	}},
}}

func permissionGateway(t *testing.T, o gatewayOpts) *gateway {
	if o.agents == nil {
		o.agents = map[string][]string{}
	}
	o.agents["perm"] = agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{permissionTurn}})
	return startGateway(t, o)
}

func TestPermissionAllowAndReject(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{})
	for _, tc := range []struct{ option, status string }{{"allow-once", "completed"}, {"reject-once", "failed"}} {
		t.Run(tc.option, func(t *testing.T) {
			id := g.create(t, "perm")
			var requestID string
			events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
				pr := ev.GetPermissionRequest()
				if pr == nil {
					return
				}
				requestID = pr.GetRequestId()
				// The call was not seen yet: the preview is built from the
				// request alone and nothing is stored.
				if pr.GetPreview().GetTitle() != "Edit main.go" || len(pr.GetOptions()) != 2 {
					t.Errorf("permission request %v", pr)
				}
				if n := len(snapshot(t, g, id).GetToolCalls()); n != 0 {
					t.Errorf("the preview was stored: %d tool calls", n)
				}
				if _, err := g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
					SessionId: id, RequestId: requestID, OptionId: "not-offered"})); codeOf(err) != connect.CodeInvalidArgument {
					t.Errorf("an option not offered: %v", err)
				}
				if _, err := g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
					SessionId: id, RequestId: requestID, OptionId: tc.option})); err != nil {
					t.Errorf("RespondPermission: %v", err)
				}
			})
			var resolved *acpv2.PermissionResolved
			for _, ev := range events {
				if r := ev.GetPermissionResolved(); r != nil {
					resolved = r
				}
			}
			if resolved.GetRequestId() != requestID || resolved.GetOutcome().GetSelectedOptionId() != tc.option {
				t.Fatalf("permission_resolved = %v", resolved)
			}
			if got := snapshot(t, g, id).GetToolCalls()[0].GetStatus(); got != tc.status {
				t.Fatalf("tool call status %q, want %q", got, tc.status)
			}
			_, err := g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: requestID, OptionId: tc.option}))
			if codeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("a second answer: %v, want failed_precondition", err)
			}
			_, err = g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: "perm-999", OptionId: tc.option}))
			if codeOf(err) != connect.CodeNotFound {
				t.Fatalf("an unknown request: %v, want not_found", err)
			}
		})
	}
}

func TestCancelAnswersPendingPermissionsCancelled(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{})
	id := g.create(t, "perm")
	events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
		if ev.GetPermissionRequest() != nil {
			if _, err := g.connect.Cancel(context.Background(), connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
				t.Errorf("Cancel: %v", err)
			}
		}
	})
	var cancelled bool
	for _, ev := range events {
		cancelled = cancelled || ev.GetPermissionResolved().GetOutcome().GetCancelled()
	}
	if !cancelled {
		t.Fatal("the pending permission request was not resolved cancelled")
	}
	if r := events[len(events)-1].GetTurnEnded(); r.GetStopReason() != "cancelled" {
		t.Fatalf("turn_ended = %v, want cancelled", r)
	}
	if _, err := g.connect.Cancel(context.Background(), connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Cancel with no turn: %v, want failed_precondition", err)
	}
}

func TestUnansweredPermissionTimesOut(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{permissionTimeout: 200 * time.Millisecond})
	id := g.create(t, "perm")
	events := turn(t, g.connect, id, nil)
	var timedOut bool
	for _, ev := range events {
		timedOut = timedOut || ev.GetPermissionResolved().GetOutcome().GetCancelled()
	}
	if !timedOut || events[len(events)-1].GetTurnEnded().GetStopReason() != "cancelled" {
		t.Fatalf("an unanswered request was not cancelled: %v", events)
	}
}

func TestAgentFailuresEndTheTurnWithAnError(t *testing.T) {
	t.Parallel()
	exit3 := 3
	agents := map[string][]string{
		"crash":   agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"bye"}}`), {Exit: &exit3}}}}}),
		"garbage": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Raw: "this is not JSON"}}}}}),
		"stderr":  agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Stderr: "warning: something"}, {Exit: &exit3}}}}}),
	}
	g := startGateway(t, gatewayOpts{agents: agents})
	for name, want := range map[string]string{"crash": "exited with status 3", "garbage": "protocol error", "stderr": "status 3"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := g.create(t, name)
			events := turn(t, g.connect, id, nil)
			end := events[len(events)-1].GetTurnEnded()
			if !strings.Contains(end.GetError(), want) || end.GetStopReason() != "" {
				t.Fatalf("turn_ended = %v, want an error mentioning %q", end, want)
			}
			// The session keeps what it had and shows the agent as lost;
			// this agent cannot be re-attached, so the next prompt starts a
			// new agent session, which fails the same way.
			snap := snapshot(t, g, id)
			if snap.GetState() != "agent_lost" || !strings.Contains(snap.GetStateDetail(), want) {
				t.Fatalf("session state %q (%q), want agent_lost mentioning %q", snap.GetState(), snap.GetStateDetail(), want)
			}
			events = startsAfresh(t, g, id)
			if end := events[len(events)-1].GetTurnEnded(); !strings.Contains(end.GetError(), want) {
				t.Fatalf("the next turn ended %v, want an error mentioning %q", end, want)
			}
		})
	}
}

// noise is n steps writing "noise 1" ... "noise n" to stderr.
func noise(n int) []agentsim.Step {
	steps := make([]agentsim.Step, n)
	for i := range steps {
		steps[i].Stderr = fmt.Sprintf("noise %d", i+1)
	}
	return steps
}

func TestAgentThatHangsOrDiesAtStartup(t *testing.T) {
	t.Parallel()
	exit1 := 1
	g := startGateway(t, gatewayOpts{startTimeout: 3 * time.Second, agents: map[string][]string{
		"hang":    agentCommand(t, agentsim.Script{Startup: []agentsim.Step{{Hang: true}}, Turns: []agentsim.Turn{{}}}),
		"die":     agentCommand(t, agentsim.Script{Startup: []agentsim.Step{{Exit: &exit1}}, Turns: []agentsim.Turn{{}}}),
		"missing": {"/nonexistent/agent-binary"},
		"v9":      agentCommand(t, agentsim.Script{ProtocolVersion: 9, Turns: []agentsim.Turn{{}}}),
		// As node does without its module: a few lines on stderr, then exit.
		"nomodule": agentCommand(t, agentsim.Script{Startup: append(noise(30),
			agentsim.Step{Stderr: "Error: Cannot find module 'nope'"}, agentsim.Step{Stderr: "Node.js v22.0.0"}, agentsim.Step{Exit: &exit1}),
			Turns: []agentsim.Turn{{}}}),
		"cat": {"cat"},
		// Answers initialize, then dies at session/new saying why.
		"nokey":   {"/bin/sh", "-c", `read -r _; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'; read -r _; echo 'Error: ANTHROPIC_API_KEY is not set' >&2; exit 1`},
		"garbage": agentCommand(t, agentsim.Script{Startup: []agentsim.Step{{Raw: "Usage: agent [options]"}, {Hang: true}}, Turns: []agentsim.Turn{{}}}),
	}})
	t.Run("each", func(t *testing.T) {
		for name, want := range map[string]string{"hang": "initialize", "die": "status 1", "missing": "no such file", "v9": "protocol version 9",
			"nomodule": "status 1; the last lines of its stderr:\nnoise 13\n", "cat": "not an ACP agent: it sent the gateway's initialize request back",
			"garbage": "not an ACP agent: its output is not ACP's JSON-RPC",
			"nokey":   "session/new: agent ended: exited with status 1; the last lines of its stderr:\nError: ANTHROPIC_API_KEY is not set"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				_, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: name, Cwd: t.TempDir()}))
				if codeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), want) ||
					!strings.Contains(err.Error(), "the agent did not start") || strings.Contains(err.Error(), "agent is gone") {
					t.Fatalf("CreateSession: %v, want unavailable: the agent did not start, mentioning %q", err, want)
				}
				if name != "nomodule" {
					return
				}
				// The last 20 lines, the cause among them; the earlier
				// noise left out.
				if !strings.HasSuffix(err.Error(), "\nError: Cannot find module 'nope'\nNode.js v22.0.0") || strings.Contains(err.Error(), "noise 12\n") ||
					strings.Count(err.Error(), "\n") != agent.StderrTailLines {
					t.Fatalf("CreateSession: %v, want the last %d lines of the agent's stderr", err, agent.StderrTailLines)
				}
			})
		}
	})
	// A session that never started is not kept: its client never got its id.
	list, err := g.connect.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 0 {
		t.Fatalf("ListSessions after failed creations = %v, %v; want none", list.Msg.GetSessions(), err)
	}
	// ListAgents starts its agents for every user: it says that the agent
	// did not start, never what its stderr said.
	agents, err := g.connect.ListAgents(context.Background(), connect.NewRequest(&acpv2.ListAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents.Msg.GetAgents() {
		if a.GetName() == "nomodule" && (a.GetError() == "" || strings.Contains(a.GetError(), "Cannot find module")) {
			t.Errorf("ListAgents says of the agent %q, want that it did not start, without its stderr", a.GetError())
		}
	}
}

// TestAgentThatRefusesANewSession: CreateSession tells what the agent
// answered session/new, with a code chosen by the agent's error, rather
// than that the agent is gone; no session is kept.
func TestAgentThatRefusesANewSession(t *testing.T) {
	t.Parallel()
	refusing := func(code int64, message string) []string {
		return agentCommand(t, agentsim.Script{ProtocolVersion: 2, NewSessionError: &agentsim.RPCError{Code: code, Message: message}})
	}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"quota":   refusing(-32603, "model quota exceeded"),
		"badcwd":  refusing(-32602, "cwd is not a git repository"),
		"missing": refusing(-32601, "no session/new here"),
	}})
	for name, want := range map[string]struct {
		code connect.Code
		says string
	}{
		"quota":   {connect.CodeFailedPrecondition, "model quota exceeded"},
		"badcwd":  {connect.CodeInvalidArgument, "cwd is not a git repository"},
		"missing": {connect.CodeFailedPrecondition, "does not implement session/new"},
	} {
		_, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: name, Cwd: t.TempDir()}))
		if codeOf(err) != want.code || !strings.Contains(err.Error(), want.says) {
			t.Errorf("%s: CreateSession: %v, want %v saying %q", name, err, want.code, want.says)
		}
	}
	list, err := g.connect.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 0 {
		t.Fatalf("ListSessions after refused creations = %v, %v; want none", list.Msg.GetSessions(), err)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{})
	ctx := context.Background()
	id := g.create(t, "perm")
	check := func(name string, err error, want connect.Code) {
		t.Helper()
		if codeOf(err) != want {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	_, err := g.connect.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "nope", Cwd: t.TempDir()}))
	check("unknown agent", err, connect.CodeInvalidArgument)
	_, err = g.connect.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: "relative/dir"}))
	check("relative cwd", err, connect.CodeInvalidArgument)
	_, err = g.connect.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: "/nonexistent/dir"}))
	check("missing cwd", err, connect.CodeInvalidArgument)
	_, err = g.connect.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: "s_unknown"}))
	check("unknown session", err, connect.CodeNotFound)
	_, err = g.connect.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{}))
	check("empty session id", err, connect.CodeInvalidArgument)
	// Every RPC naming an unknown session gets not_found.
	const unknown = "s_unknown"
	_, err = g.connect.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: unknown}))
	check("Cancel of an unknown session", err, connect.CodeNotFound)
	_, err = g.connect.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{SessionId: unknown, RequestId: "perm-1", Cancelled: true}))
	check("RespondPermission of an unknown session", err, connect.CodeNotFound)
	_, err = g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: unknown}))
	check("CloseSession of an unknown session", err, connect.CodeNotFound)
	_, err = g.connect.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: unknown, ModeId: "m"}))
	check("SetMode of an unknown session", err, connect.CodeNotFound)
	_, err = g.connect.SetConfigOption(ctx, connect.NewRequest(&acpv2.SetConfigOptionRequest{SessionId: unknown, ConfigId: "c",
		Value: &acpv2.SetConfigOptionRequest_Boolean{Boolean: true}}))
	check("SetConfigOption of an unknown session", err, connect.CodeNotFound)
	check("Prompt of an unknown session", promptErr(g, unknown, "x"), connect.CodeNotFound)
	watch, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: unknown}))
	if err == nil {
		for watch.Receive() {
		}
		err = watch.Err()
		watch.Close()
	}
	check("Watch of an unknown session", err, connect.CodeNotFound)
	_, err = g.connect.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{SessionId: id, RequestId: "perm-1"}))
	check("neither option nor cancelled", err, connect.CodeInvalidArgument)
	check("empty prompt", promptErr(g, id, ""), connect.CodeInvalidArgument)

	// A second prompt while a turn runs is refused.
	first, err := g.connect.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("one")}))
	if err != nil {
		t.Fatal(err)
	}
	var requestID string
	for first.Receive() {
		if pr := first.Msg().GetEvent().GetPermissionRequest(); pr != nil {
			requestID = pr.GetRequestId()
			break
		}
	}
	check("prompt during a turn", promptErr(g, id, "two"), connect.CodeFailedPrecondition)
	if _, err := g.connect.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{SessionId: id, RequestId: requestID, Cancelled: true})); err != nil {
		t.Fatal(err)
	}
	for first.Receive() {
	}
	if err := first.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseKillsTheAgentsProcessGroup is not parallel: it identifies the
// agent among this process's children.
func TestCloseKillsTheAgentsProcessGroup(t *testing.T) {
	script := agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}})
	// The agent leaves a grandchild behind in its process group.
	cmd := []string{"/bin/sh", "-c", `sleep 300 & exec "$0" "$1" "$2"`, script[0], script[1], script[2]}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{"sh": cmd}})
	before := childProcesses()
	id := g.create(t, "sh")
	agentPid := newChild(t, before)
	turn(t, g.connect, id, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		t.Fatal(err)
	}
	if procfs.GroupAlive(agentPid) {
		t.Fatalf("process group %d still has processes after CloseSession", agentPid)
	}
	for watch.Receive() {
	}
	if err := watch.Err(); err != nil {
		t.Fatalf("a watch of a closed session should end cleanly: %v", err)
	}
	// The closed session stays readable but takes no prompts.
	if _, err := g.connect.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id})); err != nil {
		t.Fatal(err)
	}
	err = promptErr(g, id, "x")
	if codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("prompt to a closed session: %v", err)
	}
	// A watch opened after the close replays the log, ending with the
	// closed event, and then ends rather than waiting for ever.
	late, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	var last *acpv2.SessionEvent
	for late.Receive() {
		if ev := late.Msg().GetEvent(); ev != nil {
			last = ev
		}
	}
	if err := late.Err(); err != nil || last.GetStateChanged().GetState() != "closed" {
		t.Fatalf("a watch opened after the close: last event %v, err %v; want the closed event and a clean end", last, err)
	}
	if _, err := g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		t.Fatalf("closing a closed session again: %v", err)
	}
}

func TestCloseDuringATurnEndsItsStream(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{})
	id := g.create(t, "perm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := g.connect.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if stream.Msg().GetEvent().GetPermissionRequest() != nil {
			break // the turn waits on the answer
		}
	}
	if _, err := g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		t.Fatal(err)
	}
	var last *acpv2.SessionEvent
	for stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			last = ev
		}
	}
	// Either the turn's end reached the stream first, with the agent's
	// end as its error, or the close cut the stream: then with
	// failed_precondition, never an unknown code.
	switch err := stream.Err(); {
	case err != nil:
		if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("a prompt stream of a session closed mid-turn ended with %v, want failed_precondition", err)
		}
	case last.GetTurnEnded() == nil || last.GetTurnEnded().GetError() == "":
		t.Fatalf("a prompt stream of a session closed mid-turn ended cleanly after %v, want turn_ended with an error", last)
	}
}

// TestAgentsThatEndByThemselvesLeakNothing is not parallel: it counts this
// process's file descriptors.
func TestAgentsThatEndByThemselvesLeakNothing(t *testing.T) {
	exit3 := 3
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"crash": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Exit: &exit3}}}}}),
	}})
	turn(t, g.connect, g.create(t, "crash"), nil) // opens the client's connections
	before := openFDs(t)
	for range 5 {
		turn(t, g.connect, g.create(t, "crash"), nil)
	}
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d file descriptors open after five agents crashed, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestAgentLineOverTheLimitEndsTheAgent(t *testing.T) {
	t.Parallel()
	long := `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + strings.Repeat("x", 4096) + `"}}`
	g := startGateway(t, gatewayOpts{maxAgentLine: 1024, agents: map[string][]string{
		"flood": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{update(long)}}}}),
	}})
	events := turn(t, g.connect, g.create(t, "flood"), nil)
	if end := events[len(events)-1].GetTurnEnded(); !strings.Contains(end.GetError(), "line too long") {
		t.Fatalf("turn_ended = %v, want a line-too-long error", end)
	}
	for _, ev := range events {
		if ev.GetAgentMessageChunk() != nil {
			t.Fatal("the over-long line was delivered")
		}
	}
}

func TestAgentStderrIsLoggedWithItsSession(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	g := startGateway(t, gatewayOpts{log: &logs, agents: map[string][]string{
		"noisy": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Stderr: "warning: disk nearly full"}}}}}),
	}})
	id := g.create(t, "noisy")
	turn(t, g.connect, id, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["line"] == "warning: disk nearly full" {
				if rec["session"] != id || rec["agent"] != "noisy" {
					t.Fatalf("stderr logged without its session and agent: %s", line)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's stderr line was not logged:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Not parallel: it sets a variable in the gateway's own environment.
func TestAgentsGetOnlyTheConfiguredEnvironment(t *testing.T) {
	t.Setenv("ACP_GATEWAY_TEST_SECRET", "s3cret")
	steps := []agentsim.Step{{Env: "ACP_GATEWAY_TEST_SECRET"}, {Env: "PATH"}}
	agents := map[string][]string{"env": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: steps}}})}
	for name, tc := range map[string]struct {
		env    []string
		nilEnv bool
		want   []string
	}{
		"allowlist":     {[]string{"PATH=/usr/bin:/bin"}, false, []string{"env ACP_GATEWAY_TEST_SECRET unset", "env PATH=/usr/bin:/bin"}},
		"nothing":       {[]string{}, false, []string{"env ACP_GATEWAY_TEST_SECRET unset", "env PATH unset"}},
		"nothing (nil)": {nil, true, []string{"env ACP_GATEWAY_TEST_SECRET unset", "env PATH unset"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := startGateway(t, gatewayOpts{agents: agents, env: tc.env, nilEnv: tc.nilEnv})
			var got []string
			for _, ev := range turn(t, g.connect, g.create(t, "env"), nil) {
				if text := ev.GetAgentMessageChunk().GetContent().GetText().GetText(); text != "" {
					got = append(got, text)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("the agent saw %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCancelRightAfterPromptReachesTheAgent cancels each turn the moment
// Prompt returns, before the turn's goroutine can have written
// session/prompt: the agent must still see the cancel after the prompt, or
// it would cancel nothing and the turn would run its full minute.
func TestCancelRightAfterPromptReachesTheAgent(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"slow": agentCommand(t, agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			{Sleep: agentsim.Duration(time.Minute)},
		}}}}),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := g.mgr.Get(ctx, "", g.create(t, "slow"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		sub, err := s.Prompt(ctx, textPrompt("go"))
		if err != nil {
			t.Fatalf("turn %d: Prompt: %v", i, err)
		}
		if err := s.Cancel(ctx); err != nil {
			t.Fatalf("turn %d: Cancel: %v", i, err)
		}
		var ended *acpv2.TurnEnded
		evs := make([]*encoded.Event, 16)
		for ended == nil {
			n, err := sub.NextBatch(ctx, evs)
			if err != nil {
				t.Fatalf("turn %d did not end: %v", i, err)
			}
			for _, e := range evs[:n] {
				ev, err := e.Message()
				if err != nil {
					t.Fatal(err)
				}
				if te := ev.GetTurnEnded(); te != nil {
					ended = te
				}
			}
		}
		sub.Close()
		if ended.GetStopReason() != "cancelled" {
			t.Fatalf("turn %d ended %v, want cancelled", i, ended)
		}
	}
}
