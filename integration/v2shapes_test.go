// Real agents speaking ACP v2, and config options through real agents.
//
// The SDKs' example agents send neither a v2 diff nor config options: the
// TypeScript SDK's (1.9.0: dist/examples/agent.js speaks v1,
// dual-version-agent.js v2 with whole messages only; 2.x ships no
// examples) and the Go SDK's (v0.13.0, v1, answering
// session/set_config_option -32601). Here they show that a v2 turn and the
// relays reach them, and that each refuses what it does not implement. A
// real agent's typed v2 diff and model pick are in claude_test.go (Claude
// Code's ACP adapter on a fake model API); scripted agents cover the rest
// (gateway/e2e TestV2DiffAndPermissionFieldsReachClients and
// TestSetModeAndConfigOption).

package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/kballard/go-shellquote"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// TestRealV2AgentAndConfigOption runs a turn with the TypeScript SDK's
// dual-version example agent, which negotiates ACP v2, and relays
// SetConfigOption (the model) and Logout to the real agents: each refuses
// what it does not implement, and the client is told so.
func TestRealV2AgentAndConfigOption(t *testing.T) {
	t.Parallel()
	node, err := filepath.EvalSymlinks(tool(t, nodeBinary))
	if err != nil {
		t.Fatal(err)
	}
	dual := []string{node, filepath.Join(tool(t, nodeModules), "@agentclientprotocol", "sdk", "dist", "examples", "dual-version-agent.js")}
	g := startGateway(t, "--store", "memory:",
		"--agent", "dual="+shellquote.Join(dual...),
		"--agent", "go="+shellquote.Join(tool(t, goAgentBinary)))
	ctx := context.Background()

	agents, err := g.client.ListAgents(ctx, connect.NewRequest(&acpv2.ListAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]uint32{}
	for _, a := range agents.Msg.GetAgents() {
		versions[a.GetName()] = a.GetProtocolVersion()
	}
	if versions["dual"] != 2 || versions["go"] != 1 {
		t.Fatalf("negotiated versions %v, want dual 2 and go 1", versions)
	}

	dualID := g.create(t, "dual")
	var said string
	var stop string
	for _, ev := range g.turn(t, dualID, "hello", nil) {
		for _, b := range ev.GetAgentMessage().GetContent().GetValue().GetItems() {
			said += b.GetText().GetText()
		}
		if te := ev.GetTurnEnded(); te != nil {
			stop = te.GetStopReason()
		}
	}
	if said != "Hello from the v2 implementation." || stop != "end_turn" {
		t.Fatalf("the v2 agent said %q and ended %q", said, stop)
	}

	for _, agent := range []string{"dual", "go"} {
		id := dualID
		if agent != "dual" {
			id = g.create(t, agent)
		}
		_, err := g.client.SetConfigOption(ctx, connect.NewRequest(&acpv2.SetConfigOptionRequest{
			SessionId: id, ConfigId: "model", Value: &acpv2.SetConfigOptionRequest_ValueId{ValueId: "fast"}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "session/set_config_option") {
			t.Errorf("%s: SetConfigOption: %v, want failed_precondition: the agent does not implement session/set_config_option", agent, err)
		}
		// Neither lists authentication methods, so neither offers logout
		// (v2: a client must not call auth/logout then).
		_, err = g.client.Logout(ctx, connect.NewRequest(&acpv2.LogoutRequest{SessionId: id}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "logout") {
			t.Errorf("%s: Logout: %v, want failed_precondition", agent, err)
		}
	}
}
