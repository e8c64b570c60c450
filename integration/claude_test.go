// Claude Code's ACP adapter (npm @agentclientprotocol/claude-agent-acp,
// pinned in integration/claude-agent) on a fake Anthropic Messages API at
// 127.0.0.1: a real agent that speaks ACP v2, reports its edits as v2 diffs
// (`changes` and a git `patch`) and offers its model as a config option.
//
// The adapter runs the Claude Agent SDK's bundled `claude` binary, which
// calls the Messages API at ANTHROPIC_BASE_URL. With a dummy API key, and
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC (telemetry, error reports and
// updates off), it opens no connection but to that URL: traced with strace,
// and run in a network namespace with only a loopback device, where it
// completes the same turn. It refuses to run as root (as CI does) unless
// IS_SANDBOX is set, as the test sets it.

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/kballard/go-shellquote"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// fakeMessagesAPI serves the Anthropic Messages API's streaming
// `POST /v1/messages` as a model that writes one file: a request that
// offers the Write tool and holds no tool result yet is answered with a
// Write tool use of file, and every other request (the tool result's
// follow-up, the adapter's title request) with the text done.
type fakeMessagesAPI struct {
	file string

	mu sync.Mutex
	// turnModels are the models of the requests that offered Write.
	turnModels []string
	// others are the requests that were not POST /v1/messages.
	others []string
}

// The fake model's file content and its last words.
const (
	claudeFileContent = "hello\nworld\n"
	claudeDone        = "I wrote hello.txt."
)

func (f *fakeMessagesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		f.mu.Lock()
		f.others = append(f.others, r.Method+" "+r.URL.String())
		f.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model string `json:"model"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, err), http.StatusBadRequest)
		return
	}
	write := slices.ContainsFunc(req.Tools, func(t struct {
		Name string `json:"name"`
	}) bool {
		return t.Name == "Write"
	})
	answered := false
	for _, m := range req.Messages {
		// A message's content is a string or a list of blocks.
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &blocks) == nil && slices.ContainsFunc(blocks, func(b struct {
			Type string `json:"type"`
		}) bool {
			return b.Type == "tool_result"
		}) {
			answered = true
		}
	}
	if write {
		f.mu.Lock()
		f.turnModels = append(f.turnModels, req.Model)
		f.mu.Unlock()
	}

	w.Header().Set("Content-Type", "text/event-stream")
	event := func(name string, data map[string]any) {
		data["type"] = name
		raw, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, raw)
	}
	event("message_start", map[string]any{"message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 1},
	}})
	stop := "end_turn"
	if write && !answered {
		input, _ := json.Marshal(map[string]string{"file_path": f.file, "content": claudeFileContent})
		event("content_block_start", map[string]any{"index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_fake_write", "name": "Write", "input": map[string]any{}}})
		event("content_block_delta", map[string]any{"index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		stop = "tool_use"
	} else {
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": claudeDone}})
	}
	event("content_block_stop", map[string]any{"index": 0})
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 5}})
	event("message_stop", map[string]any{})
}

// modelOption is the current value of the config option "model".
func modelOption(opts []*acpv2.SessionConfigOption) string {
	for _, o := range opts {
		if o.GetId() == "model" {
			return o.GetCurrentValue().GetStringValue()
		}
	}
	return ""
}

// TestClaudeAgentV2DiffAndModelPick runs Claude Code's ACP adapter, which
// negotiates ACP v2, through the gateway: a client picks the model with
// SetConfigOption, and GetSession shows the pick; the turn then runs on
// the picked model, and the Write it makes reaches the client, in the
// stream and in GetSession, as a typed v2 diff (`changes` and `patch`).
func TestClaudeAgentV2DiffAndModelPick(t *testing.T) {
	t.Parallel()
	node, err := filepath.EvalSymlinks(tool(t, nodeBinary))
	if err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(tool(t, claudeModules), "@agentclientprotocol", "claude-agent-acp", "dist", "index.js")
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	file := filepath.Join(cwd, "hello.txt")
	api := &fakeMessagesAPI{file: file}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	// The agent's settings and logins go to a home of the test's.
	agent := []string{env, "HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=sk-ant-fake-key-for-tests",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"IS_SANDBOX=1", node, adapter}
	g := startGateway(t, "--store", "memory:", "--agent", "claude="+shellquote.Join(agent...))
	ctx := context.Background()

	agents, err := g.client.ListAgents(ctx, connect.NewRequest(&acpv2.ListAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if a := agents.Msg.GetAgents(); len(a) != 1 || a[0].GetProtocolVersion() != 2 {
		t.Fatalf("ListAgents: %v, want claude on ACP v2", a)
	}
	created, err := g.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "claude", Cwd: cwd}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetSessionId()

	// The model picker: session/new's config options, then a pick.
	if got := modelOption(g.snapshot(t, id).GetConfigOptions()); got != "default" {
		t.Fatalf("GetSession's model option is %q before the pick, want default", got)
	}
	set, err := g.client.SetConfigOption(ctx, connect.NewRequest(&acpv2.SetConfigOptionRequest{
		SessionId: id, ConfigId: "model", Value: &acpv2.SetConfigOptionRequest_ValueId{ValueId: "haiku"}}))
	if err != nil {
		t.Fatalf("SetConfigOption(model, haiku): %v", err)
	}
	if got := modelOption(set.Msg.GetConfigOptions()); got != "haiku" {
		t.Fatalf("SetConfigOption answered the model option %q, want haiku", got)
	}
	if got := modelOption(g.snapshot(t, id).GetConfigOptions()); got != "haiku" {
		t.Fatalf("GetSession's model option is %q after the pick, want haiku", got)
	}

	events := g.turn(t, id, "Write hello.txt.", func(ev *acpv2.SessionEvent) {
		// Auto mode, the adapter's default, allows a write in the
		// session's directory without asking; should it ask, allow.
		if pr := ev.GetPermissionRequest(); pr != nil {
			for _, o := range pr.GetOptions() {
				if o.GetKind() == "allow_once" {
					if _, err := g.client.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
						SessionId: id, RequestId: pr.GetRequestId(), OptionId: o.GetOptionId()})); err != nil {
						t.Error(err)
					}
					return
				}
			}
		}
	})

	wantDiff := &acpv2.Diff{
		Changes: []*acpv2.DiffChange{{Operation: "add", Path: proto.String(file), FileType: proto.String("text")}},
		Patch: &acpv2.DiffPatch{Format: "git_patch", Text: "diff --git " + file + " " + file + "\nnew file mode 100644\n" +
			"--- /dev/null\n+++ " + file + "\n@@ -0,0 +1,2 @@\n+hello\n+world\n"},
	}
	var streamed []*acpv2.ToolCallContent
	var said, stop string
	for _, ev := range events {
		if u := ev.GetToolCallUpdate(); u.GetToolCallId() == "toolu_fake_write" {
			for _, c := range u.GetContent().GetValue().GetItems() {
				if c.GetDiff() != nil {
					streamed = append(streamed, c)
				}
			}
		}
		said += ev.GetAgentMessageChunk().GetContent().GetText().GetText()
		if te := ev.GetTurnEnded(); te != nil {
			stop = te.GetStopReason()
		}
	}
	if len(streamed) != 1 || !proto.Equal(streamed[0].GetDiff(), wantDiff) || streamed[0].GetExtra() != nil {
		t.Errorf("the streamed diffs of the Write are %v, want one typed v2 diff %v", streamed, wantDiff)
	}
	if said != claudeDone || stop != "end_turn" {
		t.Errorf("the agent said %q and ended %q, want %q and end_turn", said, stop, claudeDone)
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != claudeFileContent {
		t.Errorf("the agent wrote %q (%v), want %q", got, err, claudeFileContent)
	}

	calls := g.snapshot(t, id).GetToolCalls()
	i := slices.IndexFunc(calls, func(c *acpv2.ToolCall) bool { return c.GetToolCallId() == "toolu_fake_write" })
	if i < 0 {
		t.Fatalf("GetSession has no Write call: %v", calls)
	}
	if c := calls[i]; c.GetStatus() != "completed" || len(c.GetContent()) != 1 ||
		!proto.Equal(c.GetContent()[0].GetDiff(), wantDiff) || c.GetContent()[0].GetExtra() != nil {
		t.Errorf("GetSession's Write call is %v, want it completed with the typed v2 diff %v", c, wantDiff)
	}

	// The pick reached the model API: the agent's turn asked for Haiku
	// (the default model is Opus).
	api.mu.Lock()
	defer api.mu.Unlock()
	// At least the Write and then its result; the agent may ask again
	// (a retry when the machine is slow), always for the model picked.
	if len(api.turnModels) < 2 || slices.ContainsFunc(api.turnModels, func(m string) bool { return !strings.Contains(m, "haiku") }) {
		t.Errorf("the turn's requests asked for the models %q, want Haiku in each, two at least (the Write, then its result)", api.turnModels)
	}
	if len(api.others) != 0 {
		t.Errorf("the agent made requests the Messages API does not serve: %q", api.others)
	}
}
