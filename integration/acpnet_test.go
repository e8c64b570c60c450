package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kballard/go-shellquote"
)

// TestACPWithTheTypeScriptSDK drives /acp with the ACP TypeScript SDK's
// own client transports (integration/node/acpnet.mjs,
// @agentclientprotocol/sdk 2.4.0's createWebSocketStream over ws, and its
// createHttpStream):
// initialize, session/new, a turn whose permission request the client
// allows, a turn it cancels; then, on a new connection, session/load,
// whose replay must be what the first connection saw, with the prompts as
// the user's messages.
func TestACPWithTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := tool(t, nodeBinary)
	modules := tool(t, nodeModules)
	const token = "acpnet-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := []string{node, filepath.Join(modules, "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")}
	g := startGateway(t, "--store", "memory:", "--agent", "ts="+shellquote.Join(agent...),
		"--auth-tokens", tokens, "--any-cwd", "--sandbox", "none")
	for _, transport := range []string{"ws", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			runACPClient(t, g, node, transport, token)
		})
	}
}

// runACPClient runs acpnet.mjs over transport and checks what it saw.
func runACPClient(t *testing.T, g *gateway, node, transport, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	url := g.base + "/acp/ts"
	if transport == "ws" {
		url = "ws" + strings.TrimPrefix(url, "http")
	}
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, "acpnet.mjs"), transport, url, token, t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("acpnet.mjs: %v\n%s", err, stderr.String())
	}
	var out struct {
		SessionID   string            `json:"sessionId"`
		Asked       []string          `json:"asked"`
		StopReasons []string          `json:"stopReasons"`
		Seen        []json.RawMessage `json:"seen"`
		Replayed    []json.RawMessage `json:"replayed"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("acpnet.mjs printed %s: %v", raw, err)
	}
	if !reflect.DeepEqual(out.Asked, []string{"call_2"}) {
		t.Errorf("the client was asked permission for %q, want call_2 once", out.Asked)
	}
	if !reflect.DeepEqual(out.StopReasons, []string{"end_turn", "cancelled"}) {
		t.Errorf("stop reasons %q, want end_turn then cancelled", out.StopReasons)
	}
	if len(out.Seen) < 5 {
		t.Fatalf("the first connection saw %d updates: %s", len(out.Seen), raw)
	}
	// The replay is what the first connection saw, with the prompts as
	// the user's messages.
	var replayed []any
	var prompts []string
	for _, u := range out.Replayed {
		var v map[string]any
		if err := json.Unmarshal(u, &v); err != nil {
			t.Fatal(err)
		}
		if v["sessionUpdate"] == "user_message_chunk" {
			prompts = append(prompts, v["content"].(map[string]any)["text"].(string))
			continue
		}
		replayed = append(replayed, v)
	}
	var seen []any
	for _, u := range out.Seen {
		var v any
		if err := json.Unmarshal(u, &v); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, v)
	}
	if !reflect.DeepEqual(prompts, []string{"first", "second"}) {
		t.Errorf("replayed prompts %q, want first, second", prompts)
	}
	if !reflect.DeepEqual(replayed, seen) {
		t.Errorf("session/load replayed\n%v\nthe first connection saw\n%v", replayed, seen)
	}
	// The session is alice's gateway session, open after both connections
	// went.
	alice := *g
	alice.authenticate(token)
	if s := alice.snapshot(t, out.SessionID); s.GetAgent() != "ts" || s.GetState() == "closed" {
		t.Errorf("the gateway has the session as %v", s)
	}
}
