package agent

import (
	"encoding/json"
	"fmt"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
)

// MCP server transports (ACP McpServer).
const (
	// MCPStdio is a server the agent starts as its child, talking over
	// its stdio: baseline in ACP v1, advertised in v2
	// (capabilities.session.mcp.stdio).
	MCPStdio = "stdio"
	// MCPHTTP is a server the agent reaches over streamable HTTP (v1
	// agentCapabilities.mcpCapabilities.http, v2
	// capabilities.session.mcp.http).
	MCPHTTP = "http"
	// MCPSSE is a server the agent reaches over HTTP with server-sent
	// events (v1 agentCapabilities.mcpCapabilities.sse; v2 has none).
	MCPSSE = "sse"
)

// MCPServer is an MCP server the agent is given in session/new,
// session/resume and session/load. Env and Headers hold secrets as often
// as not: they are never logged.
type MCPServer struct {
	// Transport is MCPStdio, MCPHTTP or MCPSSE.
	Transport string `json:"transport"`
	Name      string `json:"name"`
	// Command, Args and Env are a stdio server's.
	Command string      `json:"command,omitempty"`
	Args    []string    `json:"args,omitempty"`
	Env     []NameValue `json:"env,omitempty"`
	// URL and Headers are an http or sse server's.
	URL     string      `json:"url,omitempty"`
	Headers []NameValue `json:"headers,omitempty"`
}

// NameValue is an environment variable or an HTTP header.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// MCPTransports say which MCP server transports an agent takes.
type MCPTransports struct {
	Stdio, HTTP, SSE bool
}

// takes says whether the agent takes a server over transport.
func (t MCPTransports) takes(transport string) bool {
	switch transport {
	case MCPStdio:
		return t.Stdio
	case MCPHTTP:
		return t.HTTP
	case MCPSSE:
		return t.SSE
	}
	return false
}

// mcpTransports reads the MCP transports an agent of version v advertised:
// v1's mcpCapabilities (stdio is baseline there), or v2's
// capabilities.session.mcp.
func mcpTransports(v acpjson.Version, v1 map[string]json.RawMessage, v2 json.RawMessage) MCPTransports {
	if v == acpjson.V1 {
		return MCPTransports{Stdio: true, HTTP: offered(v1["http"]), SSE: offered(v1["sse"])}
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(v2, &m)
	return MCPTransports{Stdio: offered(m["stdio"]), HTTP: offered(m["http"])}
}

// CheckMCP returns an error naming the first of servers whose transport
// the agent did not advertise, which it must not be sent.
func (a *Agent) CheckMCP(servers []MCPServer) error {
	for _, s := range servers {
		if !a.profile.MCP.takes(s.Transport) {
			return fmt.Errorf("MCP server %q: the agent takes no %s MCP servers (ACP v%d)", s.Name, s.Transport, a.Version())
		}
	}
	return nil
}

// mcpParam is the mcpServers parameter of session/new, session/resume and
// session/load: the configured servers in the negotiated version's shape
// (v1's stdio has no type; v2's has; v1 requires args, env and headers).
func (a *Agent) mcpParam() []any {
	v2 := a.Version() >= acpjson.V2
	out := make([]any, 0, len(a.cfg.MCPServers))
	for _, s := range a.cfg.MCPServers {
		m := map[string]any{"name": s.Name}
		switch s.Transport {
		case MCPStdio:
			m["command"], m["args"], m["env"] = s.Command, nonNil(s.Args), nonNil(s.Env)
			if v2 {
				m["type"] = MCPStdio
			}
		default:
			m["type"], m["url"], m["headers"] = s.Transport, s.URL, nonNil(s.Headers)
		}
		out = append(out, m)
	}
	return out
}

// nonNil makes a nil slice empty, which encodes as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
