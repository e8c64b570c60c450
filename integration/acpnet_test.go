package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/kballard/go-shellquote"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
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
	g := startGateway(t, append([]string{"--store", "memory:"}, acpGatewayArgs(t, node)...)...)
	for _, transport := range []string{"ws", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			runACPClient(t, g.base, "", node, transport)
		})
	}
}

// acpToken is alice's token on the gateways of the /acp tests.
const acpToken = "acpnet-token-0123456789"

// acpGatewayArgs are the flags of a gateway for the /acp tests: the
// TypeScript SDK's example agent as "ts", and alice's acpToken.
func acpGatewayArgs(t *testing.T, node string) []string {
	t.Helper()
	modules := tool(t, nodeModules)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(acpToken+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := []string{node, filepath.Join(modules, "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")}
	return []string{"--agent", "ts=" + shellquote.Join(agent...), "--auth-tokens", tokens, "--any-cwd", "--sandbox", "none"}
}

// TestACPReconnectsToAnotherReplica: the connection dropped, the client
// loads its session through another replica on the same Redis.
func TestACPReconnectsToAnotherReplica(t *testing.T) {
	store := redisURL(t)
	node := tool(t, nodeBinary)
	args := append([]string{"--store", store, "--lease-ttl", "1500ms", "--replica-secret-file", replicaSecret(t)}, acpGatewayArgs(t, node)...)
	a := startReplica(t, "A", args...)
	b := startReplica(t, "B", args...)
	for _, transport := range []string{"ws", "http"} {
		t.Run(transport, func(t *testing.T) {
			runACPClient(t, a.base, b.base, node, transport)
		})
	}
}

// runACPClient runs acpnet.mjs over transport against the gateway at
// base, with its second connection to base2 when set, and checks what it
// saw.
func runACPClient(t *testing.T, base, base2, node, transport string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	endpoint := func(base string) string {
		if transport == "ws" {
			base = "ws" + strings.TrimPrefix(base, "http")
		}
		return base + "/acp/ts"
	}
	args := []string{filepath.Join(nodeDir, "acpnet.mjs"), transport, endpoint(base), acpToken, t.TempDir()}
	if base2 != "" {
		args = append(args, endpoint(base2))
	}
	cmd := exec.CommandContext(ctx, node, args...)
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
	c := acpv2connect.NewSessionServiceClient(&http.Client{Transport: bearer{acpToken, http.DefaultTransport}}, base, connect.WithProtoJSON())
	res, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: out.SessionID}))
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if s := res.Msg.GetSession(); s.GetAgent() != "ts" || s.GetState() == "closed" {
		t.Errorf("the gateway has the session as %v", s)
	}
}

// TestACPElicitationWithTheTypeScriptSDK: an agent's form elicitation
// reaches a /acp client that advertised form elicitation (the TypeScript
// SDK's client app, integration/node/acpelicit.mjs, over WebSocket and
// Streamable HTTP), and the content it accepts reaches the agent
// (integration/node/elicit-agent.mjs), which the gateway told at
// initialize that it takes form elicitations.
func TestACPElicitationWithTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := tool(t, nodeBinary)
	args := acpGatewayArgs(t, node)
	args = append(args, "--store", "memory:", "--agent", "elicit="+shellquote.Join(node, mustAbs(t, filepath.Join(nodeDir, "elicit-agent.mjs"))))
	g := startGateway(t, args...)
	for _, transport := range []string{"ws", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			endpoint := g.base + "/acp/elicit"
			if transport == "ws" {
				endpoint = "ws" + strings.TrimPrefix(endpoint, "http")
			}
			cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, "acpelicit.mjs"), transport, endpoint, acpToken, t.TempDir())
			var stderr strings.Builder
			cmd.Stderr = &stderr
			raw, err := cmd.Output()
			if err != nil {
				t.Fatalf("acpelicit.mjs: %v\n%s", err, stderr.String())
			}
			var out struct {
				SessionID  string           `json:"sessionId"`
				Asked      []map[string]any `json:"asked"`
				Said       []string         `json:"said"`
				StopReason string           `json:"stopReason"`
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("acpelicit.mjs printed %s: %v", raw, err)
			}
			if len(out.Asked) != 1 || out.Asked[0]["mode"] != "form" || out.Asked[0]["message"] != "Who are you?" || out.Asked[0]["sessionId"] != out.SessionID {
				t.Fatalf("the client was asked %v, want the agent's form once, in its session", out.Asked)
			}
			if want := []string{`elicit {"action":"accept","content":{"name":"ada"}}`}; !reflect.DeepEqual(out.Said, want) || out.StopReason != "end_turn" {
				t.Fatalf("the agent said %q and the turn ended %q, want %q and end_turn", out.Said, out.StopReason, want)
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
