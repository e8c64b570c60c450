package e2e

import (
	"context"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// Secrets in the MCP servers of the tests below, which must reach the
// agent and nowhere else.
const (
	mcpEnvSecret    = "env-Okapi-5150"
	mcpHeaderSecret = "hdr-Narwhal-2718"
	mcpOpsSecret    = "ops-Tapir-1414"
)

func stdioMCP(name, command string) *acpv2.McpServer {
	return &acpv2.McpServer{Transport: &acpv2.McpServer_Stdio{Stdio: &acpv2.McpServerStdio{
		Name: name, Command: command, Args: []string{"--ro"},
		Env: []*acpv2.McpNameValue{{Name: "FS_TOKEN", Value: mcpEnvSecret}},
	}}}
}

func httpMCP(name, url string) *acpv2.McpServer {
	return &acpv2.McpServer{Transport: &acpv2.McpServer_Http{Http: &acpv2.McpServerHttp{
		Name: name, Url: url, Headers: []*acpv2.McpNameValue{{Name: "Authorization", Value: "Bearer " + mcpHeaderSecret}},
	}}}
}

func sseMCP(name, url string) *acpv2.McpServer {
	return &acpv2.McpServer{Transport: &acpv2.McpServer_Sse{Sse: &acpv2.McpServerSse{Name: name, Url: url}}}
}

// mcpGateway runs agents that echo the MCP servers they are given, with
// an allowlist and a server configured for every agent.
func mcpGateway(t *testing.T, logs io.Writer) *gateway {
	t.Helper()
	echo := func(version int, caps agentsim.MCPCapabilities) []string {
		return agentCommand(t, agentsim.Script{ProtocolVersion: version, Resume: true, EchoMCP: true, MCPCapabilities: caps})
	}
	agents := map[string][]string{
		"v1":        echo(1, agentsim.MCPCapabilities{HTTP: true}),
		"v2":        echo(2, agentsim.MCPCapabilities{Stdio: true, HTTP: true}),
		"v1-stdio":  echo(1, agentsim.MCPCapabilities{}),
		"v2-nomcp":  echo(2, agentsim.MCPCapabilities{}),
		"v1-silent": agentCommand(t, agentsim.Script{ProtocolVersion: 1, MCPCapabilities: agentsim.MCPCapabilities{HTTP: true}}),
	}
	ops := []agent.MCPServer{{Transport: agent.MCPStdio, Name: "ops", Command: "/opt/ops-mcp", Env: []agent.NameValue{{Name: "OPS", Value: mcpOpsSecret}}}}
	return startGateway(t, gatewayOpts{
		agents: agents, idleTimeout: time.Minute, fakeClock: true, log: logs,
		configure: func(c *app.Config) {
			c.Session.MCPAllow = []string{"/usr/bin/mcp-fs", "https://mcp.example.com/team"}
			c.Session.AgentMCP = map[string][]agent.MCPServer{"v1": ops, "v2": ops, "v1-silent": ops}
		},
	})
}

func createMCP(g *gateway, t *testing.T, agentName string, servers ...*acpv2.McpServer) (string, error) {
	res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{
		Agent: agentName, Cwd: t.TempDir(), McpServers: servers,
	}))
	if err != nil {
		return "", err
	}
	return res.Msg.GetSessionId(), nil
}

// echoedMCP runs a turn and returns the mcpServers the agent echoed.
func echoedMCP(t *testing.T, g *gateway, id string) any {
	t.Helper()
	for _, ev := range turn(t, g.connect, id, nil) {
		if js, ok := strings.CutPrefix(ev.GetAgentMessageChunk().GetContent().GetText().GetText(), "mcpServers: "); ok {
			var got any
			if err := json.Unmarshal([]byte(js), &got); err != nil {
				t.Fatalf("echoed mcpServers %q: %v", js, err)
			}
			return got
		}
	}
	t.Fatal("the agent did not echo its mcpServers")
	return nil
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The configured servers and the allowed ones a client gives reach the
// agent in its version's shape, in session/new and again in session/resume
// when the session is re-attached.
func TestMCPServersReachTheAgent(t *testing.T) {
	t.Parallel()
	const (
		ops  = `{"name":"ops","command":"/opt/ops-mcp","args":[],"env":[{"name":"OPS","value":"` + mcpOpsSecret + `"}]`
		fs   = `{"name":"fs","command":"/usr/bin/mcp-fs","args":["--ro"],"env":[{"name":"FS_TOKEN","value":"` + mcpEnvSecret + `"}]`
		docs = `{"type":"http","name":"docs","url":"https://mcp.example.com/team/docs","headers":[{"name":"Authorization","value":"Bearer ` + mcpHeaderSecret + `"}]}`
	)
	want := map[string]string{
		"v1": `[` + ops + `},` + fs + `},` + docs + `]`,
		"v2": `[` + ops + `,"type":"stdio"},` + fs + `,"type":"stdio"},` + docs + `]`,
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := mcpGateway(t, nil) // its own fake clock, for idleOut
			id, err := createMCP(g, t, name, stdioMCP("fs", "/usr/bin/mcp-fs"), httpMCP("docs", "https://mcp.example.com/team/docs"))
			if err != nil {
				t.Fatal(err)
			}
			if got := echoedMCP(t, g, id); !reflect.DeepEqual(got, jsonValue(t, w)) {
				t.Fatalf("session/new's mcpServers = %v, want %s", got, w)
			}
			g.idleOut(t, id)
			if got := echoedMCP(t, g, id); !reflect.DeepEqual(got, jsonValue(t, w)) {
				t.Fatalf("session/resume's mcpServers = %v, want %s", got, w)
			}
		})
	}
	t.Run("none given", func(t *testing.T) {
		t.Parallel()
		g := mcpGateway(t, nil)
		id, err := createMCP(g, t, "v1-stdio")
		if err != nil {
			t.Fatal(err)
		}
		if got := echoedMCP(t, g, id); !reflect.DeepEqual(got, []any{}) {
			t.Fatalf("mcpServers = %v, want []", got)
		}
	})
}

// A server the allowlist does not name, one with a transport the agent
// did not advertise, and a malformed one are refused, naming the server.
func TestMCPServersRefused(t *testing.T) {
	t.Parallel()
	g := mcpGateway(t, nil)
	cases := []struct {
		name, agent string
		server      *acpv2.McpServer
		want        string
	}{
		{"command not allowed", "v1", stdioMCP("sh", "/bin/sh"), `"sh"`},
		{"relative command", "v1", stdioMCP("rel", "mcp-fs"), `"rel"`},
		{"host not allowed", "v1", httpMCP("evil", "https://evil.example.org/team"), `"evil"`},
		{"host that only starts like an allowed one", "v1", httpMCP("lookalike", "https://mcp.example.com.evil.org/team"), `"lookalike"`},
		{"path beside the allowed prefix", "v1", httpMCP("beside", "https://mcp.example.com/teammate"), `"beside"`},
		{"path escaping the allowed prefix", "v1", httpMCP("dots", "https://mcp.example.com/team/../admin"), `"dots"`},
		{"encoded escape", "v1", httpMCP("encoded", "https://mcp.example.com/team/%2e%2e/admin"), `"encoded"`},
		{"scheme not allowed", "v1", httpMCP("plain", "http://mcp.example.com/team"), `"plain"`},
		{"name of a configured server", "v1", stdioMCP("ops", "/usr/bin/mcp-fs"), `"ops"`},
		{"no transport", "v1", &acpv2.McpServer{}, "mcp_servers[0]"},
		{"http to an agent without it", "v1-stdio", httpMCP("docs", "https://mcp.example.com/team"), `"docs"`},
		{"sse to an agent without it", "v1", sseMCP("events", "https://mcp.example.com/team/sse"), `"events"`},
		{"sse to a v2 agent", "v2", sseMCP("events", "https://mcp.example.com/team/sse"), `"events"`},
		{"stdio to a v2 agent without it", "v2-nomcp", stdioMCP("fs", "/usr/bin/mcp-fs"), `"fs"`},
	}
	t.Run("each", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				_, err := createMCP(g, t, c.agent, c.server)
				if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("CreateSession = %v, want invalid_argument naming %s", err, c.want)
				}
			})
		}
	})
	list, err := g.connect.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetSessions()); n != 0 {
		t.Fatalf("ListSessions after refusals holds %d sessions, want none", n)
	}
}

// The servers' env and header values are shown by neither GetSession nor
// ListSessions, and are not logged, though they reach the agent.
func TestMCPSecretsStayOutOfViewsAndLogs(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	g := mcpGateway(t, logs)
	id, err := createMCP(g, t, "v1-silent", stdioMCP("fs", "/usr/bin/mcp-fs"), httpMCP("docs", "https://mcp.example.com/team/docs"))
	if err != nil {
		t.Fatal(err)
	}
	turn(t, g.connect, id, nil)
	// A refusal names the server, not its secrets.
	_, refusal := createMCP(g, t, "v1-silent", httpMCP("evil", "https://user:pw-"+mcpHeaderSecret+"@evil.example.org/?k="+mcpHeaderSecret))
	if codeOf(refusal) != connect.CodeInvalidArgument {
		t.Fatalf("CreateSession with a server not allowed = %v", refusal)
	}
	get, err := g.connect.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	list, err := g.connect.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{
		"GetSession":   protojson.Format(get.Msg),
		"ListSessions": protojson.Format(list.Msg),
		"the refusal":  refusal.Error(),
		"the logs":     logs.String(),
	}
	for where, text := range seen {
		for _, secret := range []string{mcpEnvSecret, mcpHeaderSecret, mcpOpsSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%s show a secret of an MCP server: %s", where, text)
			}
		}
	}
}
