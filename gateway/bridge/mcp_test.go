package bridge_test

import (
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
)

// The editor's MCP servers reach the agent through the gateway, which
// refuses those its allowlist does not name.
func TestEditorsMCPServersArePassedOn(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": {ProtocolVersion: 1, EchoMCP: true}},
		func(c *app.Config) { c.Session.MCPAllow = []string{"/usr/bin/mcp-fs"} })
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	init := r.until(isResponse(1))
	caps, _ := init[len(init)-1]["result"].(map[string]any)["agentCapabilities"].(map[string]any)
	if mcp, _ := caps["mcpCapabilities"].(map[string]any); mcp["http"] != true || mcp["sse"] != true {
		t.Errorf("mcpCapabilities %v: the bridge passes http and sse servers on", caps["mcpCapabilities"])
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[` +
		`{"name":"fs","command":"/usr/bin/mcp-fs","args":["--ro"],"env":[{"name":"K","value":"V"}]}]}}`)
	res := r.until(isResponse(2))
	sid, _ := res[len(res)-1]["result"].(map[string]any)["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new: %v", res[len(res)-1])
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"go"}]}}`)
	var echoed string
	for _, m := range r.until(isResponse(3)) {
		if u := updateOf(m); u != nil {
			text, _ := u["content"].(map[string]any)["text"].(string)
			if s, ok := strings.CutPrefix(text, "mcpServers: "); ok {
				echoed = s
			}
		}
	}
	if want := `[{"args":["--ro"],"command":"/usr/bin/mcp-fs","env":[{"name":"K","value":"V"}],"name":"fs"}]`; echoed != want {
		t.Errorf("the agent got mcpServers %s, want %s", echoed, want)
	}
	r.send(`{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[` +
		`{"type":"http","name":"docs","url":"https://mcp.example.com/","headers":[]}]}}`)
	res = r.until(isResponse(4))
	e, _ := res[len(res)-1]["error"].(map[string]any)
	if msg, _ := e["message"].(string); e["code"] != -32602.0 || !strings.Contains(msg, `"docs"`) {
		t.Errorf("session/new with a server not allowed: %v, want -32602 naming it", res[len(res)-1])
	}
}
