package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// mcpFlags collects repeated --agent-mcp NAME=SERVER flags: the MCP
// servers every session of agent NAME is given. SERVER is an ACP McpServer
// in JSON: {"name","command","args","env":[{"name","value"}]} for stdio,
// {"type":"http" or "sse","name","url","headers":[{"name","value"}]}.
type mcpFlags map[string][]agent.MCPServer

func (m mcpFlags) String() string { return "" }

func (m mcpFlags) Set(v string) error {
	name, js, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want AGENT=SERVER_JSON, got %q", v)
	}
	s, err := parseMCPServer(js)
	if err != nil {
		return fmt.Errorf("agent %q: %v", name, err)
	}
	for _, o := range m[name] {
		if o.Name == s.Name {
			return fmt.Errorf("agent %q: two MCP servers are named %q", name, s.Name)
		}
	}
	m[name] = append(m[name], s)
	return nil
}

// parseMCPServer reads an ACP McpServer. Its errors never quote env or
// header values.
func parseMCPServer(js string) (agent.MCPServer, error) {
	var in struct {
		Type    string            `json:"type"`
		Name    string            `json:"name"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     []agent.NameValue `json:"env"`
		URL     string            `json:"url"`
		Headers []agent.NameValue `json:"headers"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return agent.MCPServer{}, fmt.Errorf("an MCP server in JSON, as ACP gives it: %v", err)
	}
	s := agent.MCPServer{Transport: in.Type, Name: in.Name}
	if s.Transport == "" {
		s.Transport = agent.MCPStdio
	}
	switch {
	case in.Name == "":
		return s, fmt.Errorf("an MCP server has no name")
	case s.Transport == agent.MCPStdio && (!filepath.IsAbs(in.Command) || in.URL != "" || in.Headers != nil):
		return s, fmt.Errorf("MCP server %q: a stdio server has an absolute command, and no url or headers", in.Name)
	case s.Transport == agent.MCPStdio:
		s.Command, s.Args, s.Env = in.Command, in.Args, in.Env
	case s.Transport != agent.MCPHTTP && s.Transport != agent.MCPSSE:
		return s, fmt.Errorf("MCP server %q: type %q is none of stdio, http, sse", in.Name, in.Type)
	case in.Command != "" || in.Args != nil || in.Env != nil:
		return s, fmt.Errorf("MCP server %q: an %s server has a url and headers, no command", in.Name, s.Transport)
	default:
		u, err := url.Parse(in.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("MCP server %q: url is not an http or https URL", in.Name)
		}
		s.URL, s.Headers = in.URL, in.Headers
	}
	return s, nil
}
