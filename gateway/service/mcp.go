package service

import (
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// maxMCPServers bounds the MCP servers a CreateSession may give.
const maxMCPServers = 32

// mcpServers reads CreateSessionRequest.mcp_servers. Whether each is
// allowed is the manager's to say.
func mcpServers(in []*acpv2.McpServer) ([]agent.MCPServer, error) {
	if len(in) > maxMCPServers {
		return nil, invalid("mcp_servers holds %d servers, more than %d", len(in), maxMCPServers)
	}
	out := make([]agent.MCPServer, 0, len(in))
	for i, s := range in {
		var m agent.MCPServer
		switch t := s.GetTransport().(type) {
		case *acpv2.McpServer_Stdio:
			m = agent.MCPServer{Transport: agent.MCPStdio, Name: t.Stdio.GetName(), Command: t.Stdio.GetCommand(),
				Args: t.Stdio.GetArgs(), Env: nameValues(t.Stdio.GetEnv())}
		case *acpv2.McpServer_Http:
			m = agent.MCPServer{Transport: agent.MCPHTTP, Name: t.Http.GetName(), URL: t.Http.GetUrl(), Headers: nameValues(t.Http.GetHeaders())}
		case *acpv2.McpServer_Sse:
			m = agent.MCPServer{Transport: agent.MCPSSE, Name: t.Sse.GetName(), URL: t.Sse.GetUrl(), Headers: nameValues(t.Sse.GetHeaders())}
		default:
			return nil, invalid("mcp_servers[%d] has no transport (stdio, http or sse)", i)
		}
		out = append(out, m)
	}
	return out, nil
}

func nameValues(in []*acpv2.McpNameValue) []agent.NameValue {
	out := make([]agent.NameValue, len(in))
	for i, nv := range in {
		out[i] = agent.NameValue{Name: nv.GetName(), Value: nv.GetValue()}
	}
	return out
}
