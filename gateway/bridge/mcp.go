package bridge

import (
	"encoding/json"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// mcpServers converts the editor's mcpServers (ACP McpServer, v1 or v2:
// a stdio server has no type in v1, "stdio" in v2) for CreateSession,
// whose gateway decides which it allows.
func mcpServers(raws []json.RawMessage) ([]*acpv2.McpServer, error) {
	out := make([]*acpv2.McpServer, 0, len(raws))
	for i, raw := range raws {
		var s struct {
			Type    string          `json:"type"`
			Name    string          `json:"name"`
			Command string          `json:"command"`
			Args    []string        `json:"args"`
			Env     []*nameValue    `json:"env"`
			URL     string          `json:"url"`
			Headers []*nameValue    `json:"headers"`
			Meta    json.RawMessage `json:"_meta"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalidParams("session/new: mcpServers[%d]: %v", i, err)
		}
		switch s.Type {
		case "", "stdio":
			out = append(out, &acpv2.McpServer{Transport: &acpv2.McpServer_Stdio{Stdio: &acpv2.McpServerStdio{
				Name: s.Name, Command: s.Command, Args: s.Args, Env: nameValues(s.Env)}}})
		case "http":
			out = append(out, &acpv2.McpServer{Transport: &acpv2.McpServer_Http{Http: &acpv2.McpServerHttp{
				Name: s.Name, Url: s.URL, Headers: nameValues(s.Headers)}}})
		case "sse":
			out = append(out, &acpv2.McpServer{Transport: &acpv2.McpServer_Sse{Sse: &acpv2.McpServerSse{
				Name: s.Name, Url: s.URL, Headers: nameValues(s.Headers)}}})
		default:
			return nil, invalidParams("session/new: mcpServers[%d] (%q): type %q is none the gateway takes (stdio, http, sse)", i, s.Name, s.Type)
		}
	}
	return out, nil
}

// nameValue is an ACP EnvVariable or HttpHeader.
type nameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func nameValues(in []*nameValue) []*acpv2.McpNameValue {
	out := make([]*acpv2.McpNameValue, 0, len(in))
	for _, nv := range in {
		if nv != nil {
			out = append(out, &acpv2.McpNameValue{Name: nv.Name, Value: nv.Value})
		}
	}
	return out
}
