// Real ACP agents from the registries, run by the real binary: the
// TypeScript SDK's example agent (npm @agentclientprotocol/sdk) and the Go
// SDK's (github.com/coder/acp-go-sdk/example/agent).

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/kballard/go-shellquote"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// What the example agents send. Both SDKs ship the same scripted turn
// (TypeScript: dist/examples/agent.js simulateTurn; Go: example/agent/main.go
// simulateTurn), with one-second pauses between its steps:
//
//	agent_message_chunk  msgStart
//	tool_call            call_1 (callOneStart)
//	tool_call_update     call_1 completed, with content and rawOutput (callOneDone)
//	agent_message_chunk  msgMiddle
//	tool_call            call_2 (callTwoStart)
//	session/request_permission for call_2 (permissionPatch; options allow, reject)
//	allow:  tool_call_update call_2 completed (callTwoAllowed), agent_message_chunk msgAllowed
//	reject: agent_message_chunk msgRejected
//
// The Go agent first sends goDisclaimer, and its call_2 update on allow
// carries the title again. Both negotiate ACP protocol version 1, so
// tool_call and tool_call_update are both the v2 upsert: every turn re-sends
// tool_call for ids the session already knows.
const (
	goDisclaimer = "ACP Go Example Agent — demo only (no AI model)."
	msgStart     = "I'll help you with that. Let me start by reading some files to understand the current situation."
	msgMiddle    = " Now I understand the project structure. I need to make some changes to improve it."
	msgAllowed   = " Perfect! I've successfully updated the configuration. The changes have been applied."
	msgRejected  = " I understand you prefer not to make that change. I'll skip the configuration update."

	callOneStart = `{"toolCallId":"call_1","title":{"value":"Reading project files"},"kind":{"value":"read"},"status":{"value":"pending"},
		"locations":{"value":{"items":[{"path":"/project/README.md"}]}},"rawInput":{"value":{"path":"/project/README.md"}}}`
	callOneDone = `{"toolCallId":"call_1","status":{"value":"completed"},
		"content":{"value":{"items":[{"content":{"text":{"text":"# My Project\n\nThis is a sample project..."}}}]}},
		"rawOutput":{"value":{"content":"# My Project\n\nThis is a sample project..."}}}`
	callTwoStart = `{"toolCallId":"call_2","title":{"value":"Modifying critical configuration file"},"kind":{"value":"edit"},"status":{"value":"pending"},
		"locations":{"value":{"items":[{"path":"/project/config.json"}]}},
		"rawInput":{"value":{"path":"/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"}}}`
	// The permission request names call_2 with other paths than its tool_call.
	permissionPatch = `{"toolCallId":"call_2","title":{"value":"Modifying critical configuration file"},"kind":{"value":"edit"},"status":{"value":"pending"},
		"locations":{"value":{"items":[{"path":"/home/user/project/config.json"}]}},
		"rawInput":{"value":{"path":"/home/user/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"}}}`
	permissionOptions = `[{"optionId":"allow","name":"Allow this change","kind":"allow_once"},
		{"optionId":"reject","name":"Skip this change","kind":"reject_once"}]`
	tsCallTwoAllowed = `{"toolCallId":"call_2","status":{"value":"completed"},"rawOutput":{"value":{"success":true,"message":"Configuration updated"}}}`
	goCallTwoAllowed = `{"toolCallId":"call_2","title":{"value":"Modifying critical configuration file"},"status":{"value":"completed"},
		"rawOutput":{"value":{"success":true,"message":"Configuration updated"}}}`

	// The merged calls after a turn: the stored call_2 keeps the paths of
	// its tool_call, not those of the permission request.
	callOneMerged = `{"toolCallId":"call_1","title":"Reading project files","kind":"read","status":"completed",
		"content":[{"content":{"text":{"text":"# My Project\n\nThis is a sample project..."}}}],
		"locations":[{"path":"/project/README.md"}],"rawInput":{"path":"/project/README.md"},
		"rawOutput":{"content":"# My Project\n\nThis is a sample project..."}}`
	callTwoAllowedMerged = `{"toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"completed",
		"locations":[{"path":"/project/config.json"}],"rawInput":{"path":"/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"},
		"rawOutput":{"success":true,"message":"Configuration updated"}}`
	// After a rejected turn call_2 is pending again (its tool_call said so
	// and nothing followed), and keeps the rawOutput of the earlier, allowed
	// turn: v1 tool_call omits rawOutput, which leaves it unchanged.
	callTwoRejectedMerged = `{"toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"pending",
		"locations":[{"path":"/project/config.json"}],"rawInput":{"path":"/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"},
		"rawOutput":{"success":true,"message":"Configuration updated"}}`
)

// exampleAgent is one SDK's example agent as the gateway runs it.
type exampleAgent struct {
	name string
	// command is its command line.
	command []string
	// preamble are the message chunks it sends before msgStart.
	preamble []string
	// allowed is its call_2 update after "allow".
	allowed string
}

func exampleAgents(t *testing.T) []exampleAgent {
	t.Helper()
	// node by its real path: a sandbox shows the directory of the agent's
	// program, and a node that is a symbolic link (/usr/local/bin/node to
	// an install elsewhere) would leave its target out.
	node, err := filepath.EvalSymlinks(tool(t, nodeBinary))
	if err != nil {
		t.Fatal(err)
	}
	modules := tool(t, nodeModules)
	return []exampleAgent{
		{
			name:    "ts",
			command: []string{node, filepath.Join(modules, "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")},
			allowed: tsCallTwoAllowed,
		},
		{
			name:     "go",
			command:  []string{tool(t, goAgentBinary)},
			preamble: []string{goDisclaimer},
			allowed:  goCallTwoAllowed,
		},
	}
}

// realAgentsUser is the user TestRealAgents calls an authenticating
// gateway as, and realAgentsToken their token.
const (
	realAgentsUser  = "alice"
	realAgentsToken = "real-agents-token"
)

// TestRealAgents runs four turns with each example agent: one whose
// permission request is allowed, one where it is rejected, one cancelled
// mid-turn, and one cancelled while its permission request is pending.
//
// It runs them through three gateways: one without authentication, whose
// agents run unconfined by default; one that confines them in bubblewrap
// sandboxes, asked for with --sandbox bwrap; and one with authentication
// (a token file and --workspace-root), where bwrap is the default, each
// session working in a new directory of its user's in the workspace root.
// Each gateway must say at start-up how it confines agents, and each agent
// must run in namespaces of its own exactly when it is sandboxed, so that
// no variant passes unconfined.
func TestRealAgents(t *testing.T) {
	t.Parallel()
	agents := exampleAgents(t)
	modules := tool(t, nodeModules)
	base := []string{"--store", "memory:"}
	for _, a := range agents {
		base = append(base, "--agent", a.name+"="+shellquote.Join(a.command...))
	}
	// What a sandbox must add for the agents. The sandbox shows the system
	// (/usr, /bin, /sbin, /lib*, /etc) and the directories of an agent's
	// program and of the script its program runs: the Go agent's
	// directory, node's (wherever exampleAgents found it; node needs
	// nothing of its install but its executable and the system's shared
	// libraries) and the TypeScript SDK's dist/examples, nothing more.
	// agent.js imports ../acp.js (else ERR_MODULE_NOT_FOUND, and the agent
	// exits before initialize), which imports the npm package zod, and node
	// reads the SDK's package.json ("type": "module"): all of them are in
	// integration/node/node_modules, which the agents only read, so
	// --sandbox-ro. --sandbox-homes keeps the users' agent homes in the
	// test's directory.
	sandboxed := func(t *testing.T) []string {
		return []string{"--sandbox-ro", modules, "--sandbox-homes", t.TempDir()}
	}
	for _, c := range []struct {
		name string
		// sandbox is how the gateway must log it confines agents.
		sandbox string
		// args are the gateway's flags besides --store and --agent; root
		// is its --workspace-root, if any.
		args func(t *testing.T, root string) []string
		// auth makes the gateway authenticate with a token file, and the
		// test call it as realAgentsUser.
		auth bool
	}{
		{name: "unconfined", sandbox: "none", args: func(*testing.T, string) []string { return nil }},
		{name: "bwrap", sandbox: "bwrap", args: func(t *testing.T, _ string) []string {
			return append([]string{"--sandbox", "bwrap"}, sandboxed(t)...)
		}},
		{name: "auth", sandbox: "bwrap", auth: true, args: func(t *testing.T, root string) []string {
			tokens := filepath.Join(t.TempDir(), "tokens")
			line := realAgentsToken + " " + realAgentsUser + "\n"
			if err := os.WriteFile(tokens, []byte(line), 0o600); err != nil {
				t.Fatal(err)
			}
			return append([]string{"--auth-tokens", tokens, "--workspace-root", root}, sandboxed(t)...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			g := startGateway(t, slices.Concat(base, c.args(t, root))...)
			if got := g.logged(t, "agents confined")["sandbox"]; got != c.sandbox {
				t.Fatalf("the gateway confines agents with sandbox %v, want %s", got, c.sandbox)
			}
			if c.auth {
				g.authenticate(realAgentsToken)
				g.freshCwd = true
			}
			for _, a := range agents {
				t.Run(a.name, func(t *testing.T) {
					t.Parallel()
					a.run(t, g, func(id string) {
						checkConfined(t, g, a.command, c.sandbox == "bwrap")
						if c.auth {
							checkCwdIn(t, g.snapshot(t, id).GetCwd(), filepath.Join(root, realAgentsUser))
						}
					})
				})
			}
		})
	}
}

// checkConfined checks that the one process of the gateway running command
// is in a mount, user and pid namespace of its own when sandboxed, or in
// the test's when not.
func checkConfined(t *testing.T, g *gateway, command []string, sandboxed bool) {
	t.Helper()
	var pids []int
	for _, pid := range descendants(g.cmd.Process.Pid) {
		if slices.Equal(procfs.Cmdline(pid), command) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("the gateway runs %d processes of %q, want 1: %v", len(pids), command, pids)
	}
	for _, ns := range []string{"mnt", "user", "pid"} {
		mine, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pids[0], ns))
		if err != nil {
			t.Fatal(err)
		}
		if (its != mine) != sandboxed {
			t.Errorf("agent %q (process %d) is in %s namespace %s, the test in %s: want sandboxed %v", command[0], pids[0], ns, its, mine, sandboxed)
		}
	}
}

// descendants lists the living processes under process parent.
func descendants(parent int) []int {
	children := map[int][]int{}
	for _, p := range procfs.List() {
		if !p.Zombie {
			children[p.PPID] = append(children[p.PPID], p.PID)
		}
	}
	var out []int
	for queue := children[parent]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// checkCwdIn checks that a session's cwd is a directory inside dir.
func checkCwdIn(t *testing.T, cwd, dir string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rel, err := filepath.Rel(dir, cwd); err != nil || rel == "." || !filepath.IsLocal(rel) {
		t.Errorf("the session's cwd %q is not a directory inside %s", cwd, dir)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		t.Errorf("the session's cwd %q is not a directory: %v", cwd, err)
	}
}

// run runs the four turns of TestRealAgents in a new session of a, and
// calls check with the session's id once its agent has completed a turn.
func (a exampleAgent) run(t *testing.T, g *gateway, check func(id string)) {
	id := g.create(t, a.name)
	var all []*acpv2.SessionEvent
	callOne := mustProto[*acpv2.ToolCall](t, callOneMerged)

	// Allowed: call_2 completes.
	allowed := g.turn(t, id, "Improve the configuration.", a.answer(t, g, id, "allow"))
	testutil.CheckSeqs(t, allowed, 1)
	check(id)
	a.checkFullTurn(t, allowed, "allow")
	checkToolCalls(t, g.snapshot(t, id), callOne, mustProto[*acpv2.ToolCall](t, callTwoAllowedMerged))
	all = append(all, allowed...)

	// Rejected: the agent re-sends tool_call for both known ids, and call_2
	// gets no update after the rejection.
	rejected := g.turn(t, id, "Try again.", a.answer(t, g, id, "reject"))
	testutil.CheckSeqs(t, rejected, allowed[len(allowed)-1].GetSeq()+1)
	a.checkFullTurn(t, rejected, "reject")
	checkToolCalls(t, g.snapshot(t, id), callOne, mustProto[*acpv2.ToolCall](t, callTwoRejectedMerged))
	all = append(all, rejected...)

	// Cancelled mid-turn, in the pause after its first message.
	var cancelled bool
	mid := g.turn(t, id, "Start, then stop.", func(ev *acpv2.SessionEvent) {
		if ev.GetAgentMessageChunk() != nil && !cancelled {
			cancelled = true
			g.cancel(t, id)
		}
		if ev.GetPermissionRequest() != nil {
			t.Errorf("the turn reached its permission request although it was cancelled at its first message")
			g.cancel(t, id)
		}
	})
	testutil.CheckSeqs(t, mid, rejected[len(rejected)-1].GetSeq()+1)
	if end := mid[len(mid)-1].GetTurnEnded(); end.GetStopReason() != "cancelled" || end.GetReason() != acpv2.StopReason_STOP_REASON_CANCELLED || end.GetError() != "" {
		t.Fatalf("the cancelled turn ended with %v, want stop reason cancelled", end)
	}
	all = append(all, mid...)

	// Cancelled while the permission request is pending: the gateway
	// answers the request "cancelled" for the client, and the turn ends.
	var asked string
	pending := g.turn(t, id, "Ask, then stop.", func(ev *acpv2.SessionEvent) {
		if p := ev.GetPermissionRequest(); p != nil && asked == "" {
			asked = p.GetRequestId()
			g.cancel(t, id)
		}
	})
	testutil.CheckSeqs(t, pending, mid[len(mid)-1].GetSeq()+1)
	i := slices.IndexFunc(pending, func(ev *acpv2.SessionEvent) bool { return ev.GetPermissionResolved() != nil })
	if asked == "" || i < 0 || pending[i].GetPermissionResolved().GetRequestId() != asked ||
		!pending[i].GetPermissionResolved().GetOutcome().GetCancelled() {
		t.Fatalf("cancelling the turn did not resolve its permission request %q as cancelled: %v", asked, pending)
	}
	end := pending[len(pending)-1].GetTurnEnded()
	// The examples answer a cancelled permission by ending the turn
	// normally (agent.js: `if (outcome === "cancelled") return;` then
	// end_turn; the Go agent too unless its context was cancelled first).
	if end.GetError() != "" || (end.GetStopReason() != "cancelled" && end.GetStopReason() != "end_turn") {
		t.Fatalf("the turn cancelled at its permission request ended with %v", end)
	}
	t.Logf("%s: a turn cancelled at its permission request ends %q", a.name, end.GetStopReason())
	all = append(all, pending...)

	// The session's log is the four turns, numbered from 1 without a gap,
	// and its snapshots are what the deltas merge into.
	snap := g.snapshot(t, id)
	if snap.GetLastSeq() != all[len(all)-1].GetSeq() || snap.GetState() != "ready" || snap.GetAgent() != a.name {
		t.Fatalf("GetSession: last seq %d (want %d), state %q, agent %q", snap.GetLastSeq(), all[len(all)-1].GetSeq(), snap.GetState(), snap.GetAgent())
	}
	replayed := g.watchFrom(t, id, 0, len(all))
	testutil.CheckSeqs(t, replayed, 1)
	if !equalEvents(replayed, all) {
		t.Fatal("Watch from 0 does not replay the turns' events")
	}
	testutil.CheckReplay(t, all, snap.GetToolCalls())
	if _, err := g.client.CloseSession(context.Background(), connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
}

// answer returns a turn's reaction that answers its permission request
// with option, after checking the request against what the agent sent.
func (a exampleAgent) answer(t *testing.T, g *gateway, id, option string) func(*acpv2.SessionEvent) {
	return func(ev *acpv2.SessionEvent) {
		p := ev.GetPermissionRequest()
		if p == nil {
			return
		}
		if want := mustProto[*acpv2.ToolCallUpdate](t, permissionPatch); !proto.Equal(p.GetToolCall(), want) {
			t.Errorf("permission request names %v, the agent sent %v", p.GetToolCall(), want)
		}
		var opts acpv2.PermissionRequest
		if err := protojson.Unmarshal([]byte(`{"options":`+permissionOptions+`}`), &opts); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(p.GetOptions(), opts.GetOptions(), func(x, y *acpv2.PermissionOption) bool { return proto.Equal(x, y) }) {
			t.Errorf("permission options %v, the agent sent %v", p.GetOptions(), opts.GetOptions())
		}
		// The preview shows the request's paths; the stored call keeps its own.
		if pv := p.GetPreview(); pv.GetToolCallId() != "call_2" || len(pv.GetLocations()) != 1 ||
			pv.GetLocations()[0].GetPath() != "/home/user/project/config.json" || pv.GetStatus() != "pending" {
			t.Errorf("permission preview %v", pv)
		}
		_, err := g.client.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
			SessionId: id, RequestId: p.GetRequestId(), OptionId: option}))
		if err != nil {
			t.Errorf("RespondPermission(%s, %s): %v", p.GetRequestId(), option, err)
		}
	}
}

// checkFullTurn checks a turn that ran to its end after its permission
// request was answered with option: the order of its events, its messages,
// the tool-call deltas as the agent sent them, and the answer.
func (a exampleAgent) checkFullTurn(t *testing.T, events []*acpv2.SessionEvent, option string) {
	t.Helper()
	wantTrace := []string{"turn_started"}
	wantTrace = append(wantTrace, slices.Repeat([]string{"message"}, len(a.preamble))...)
	wantTrace = append(wantTrace, "message", "update call_1", "merged call_1", "update call_1", "merged call_1",
		"message", "update call_2", "merged call_2", "permission call_2", "resolved "+option)
	wantMessages := append(slices.Clone(a.preamble), msgStart, msgMiddle)
	wantUpdates := []string{callOneStart, callOneDone, callTwoStart}
	if option == "allow" {
		wantTrace = append(wantTrace, "update call_2", "merged call_2", "message")
		wantMessages = append(wantMessages, msgAllowed)
		wantUpdates = append(wantUpdates, a.allowed)
	} else {
		wantTrace = append(wantTrace, "message")
		wantMessages = append(wantMessages, msgRejected)
	}
	wantTrace = append(wantTrace, "turn_ended end_turn")
	if got := trace(events); !slices.Equal(got, wantTrace) {
		t.Fatalf("the %s turn's events:\n  %s\nwant (the order the agent sent them in):\n  %s",
			option, strings.Join(got, ", "), strings.Join(wantTrace, ", "))
	}
	var messages []string
	var updates []*acpv2.ToolCallUpdate
	for _, ev := range events {
		if m := ev.GetAgentMessageChunk(); m != nil {
			messages = append(messages, m.GetContent().GetText().GetText())
		}
		if u := ev.GetToolCallUpdate(); u != nil {
			updates = append(updates, u)
		}
	}
	if !slices.Equal(messages, wantMessages) {
		t.Fatalf("agent messages %q, want %q", messages, wantMessages)
	}
	for i, u := range updates {
		if want := mustProto[*acpv2.ToolCallUpdate](t, wantUpdates[i]); !proto.Equal(u, want) {
			t.Fatalf("tool_call_update %d = %v\nthe agent sent %v", i, u, want)
		}
	}
	if end := events[len(events)-1].GetTurnEnded(); end.GetReason() != acpv2.StopReason_STOP_REASON_END_TURN || end.GetError() != "" {
		t.Fatalf("turn_ended = %v", end)
	}
}

// trace describes each event in a word or two.
func trace(events []*acpv2.SessionEvent) []string {
	var out []string
	for _, ev := range events {
		var s string
		switch {
		case ev.GetTurnStarted() != nil:
			s = "turn_started"
		case ev.GetAgentMessageChunk() != nil:
			s = "message"
		case ev.GetToolCallUpdate() != nil:
			s = "update " + ev.GetToolCallUpdate().GetToolCallId()
		case ev.GetToolCall() != nil:
			s = "merged " + ev.GetToolCall().GetToolCallId()
		case ev.GetPermissionRequest() != nil:
			s = "permission " + ev.GetPermissionRequest().GetToolCall().GetToolCallId()
		case ev.GetPermissionResolved() != nil:
			o := ev.GetPermissionResolved().GetOutcome()
			s = "resolved " + o.GetSelectedOptionId()
			if o.GetCancelled() {
				s = "resolved cancelled"
			}
		case ev.GetTurnEnded() != nil:
			s = "turn_ended " + ev.GetTurnEnded().GetStopReason()
		default:
			s = fmt.Sprintf("%T", ev.GetEvent())
		}
		out = append(out, s)
	}
	return out
}

func (g *gateway) cancel(t *testing.T, id string) {
	t.Helper()
	if _, err := g.client.Cancel(context.Background(), connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
		t.Errorf("Cancel: %v", err)
	}
}

// checkToolCalls compares GetSession's tool calls with want, in order.
func checkToolCalls(t *testing.T, snap *acpv2.SessionSnapshot, want ...*acpv2.ToolCall) {
	t.Helper()
	got := snap.GetToolCalls()
	if !slices.EqualFunc(got, want, func(x, y *acpv2.ToolCall) bool { return proto.Equal(x, y) }) {
		t.Fatalf("GetSession tool calls:\n  %v\nwant (derived from what the agent sent):\n  %v", got, want)
	}
}

// mustProto decodes proto JSON into a new M.
func mustProto[M proto.Message](t *testing.T, js string) M {
	t.Helper()
	var m M
	m = m.ProtoReflect().Type().New().Interface().(M)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("bad test data %s: %v", js, err)
	}
	return m
}
