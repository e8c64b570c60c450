package main

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// --mcp-allow and --agent-mcp, from the command line or the config file,
// reach the session manager; by default no MCP server is allowed.
func TestMCPFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe([]string{"--store", "memory:"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.sessionOptions(nil, nil, "", &confinement{}); len(o.MCPAllow) != 0 || len(o.AgentMCP) != 0 {
		t.Fatalf("by default: MCPAllow %q, AgentMCP %v; want none", o.MCPAllow, o.AgentMCP)
	}
	path := writeTemp(t, "gateway.yaml", `store: "memory:"
agent:
  one: /bin/one
  two: /bin/two
agent-mcp:
  one:
    - {name: fs, command: /usr/bin/mcp-fs, args: [--ro], env: [{name: TOKEN, value: s3cret}]}
    - {type: http, name: docs, url: "https://mcp.example.com/", headers: []}
mcp-allow: [/usr/bin/mcp-fs, "https://mcp.example.com/team"]
`)
	cfg, err = parseServe([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.sessionOptions(nil, nil, "", &confinement{})
	want := map[string][]agent.MCPServer{"one": {
		{Transport: agent.MCPStdio, Name: "fs", Command: "/usr/bin/mcp-fs", Args: []string{"--ro"}, Env: []agent.NameValue{{Name: "TOKEN", Value: "s3cret"}}},
		{Transport: agent.MCPHTTP, Name: "docs", URL: "https://mcp.example.com/", Headers: []agent.NameValue{}},
	}}
	if !reflect.DeepEqual(o.AgentMCP, want) {
		t.Errorf("AgentMCP from the file = %+v, want %+v", o.AgentMCP, want)
	}
	if got := strings.Join(o.MCPAllow, " "); got != "/usr/bin/mcp-fs https://mcp.example.com/team" {
		t.Errorf("MCPAllow %q", got)
	}
	// The command line wins over the file, as for every flag.
	cfg, err = parseServe([]string{"--config", path, "--agent-mcp", `two={"type":"sse","name":"events","url":"http://10.0.0.5:8000/sse"}`}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]agent.MCPServer{"two": {{Transport: agent.MCPSSE, Name: "events", URL: "http://10.0.0.5:8000/sse"}}}
	if o := cfg.sessionOptions(nil, nil, "", &confinement{}); !reflect.DeepEqual(o.AgentMCP, want) {
		t.Errorf("AgentMCP from the command line = %+v, want %+v", o.AgentMCP, want)
	}
}

func TestBadMCPFlagsAreRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--mcp-allow", "mcp-fs"},
		{"--mcp-allow", "/usr/bin/../bin/mcp-fs"},
		{"--mcp-allow", "ftp://mcp.example.com"},
		{"--mcp-allow", "https://user@mcp.example.com"},
		{"--mcp-allow", "https://mcp.example.com/a/../b"},
		{"--agent-mcp", `nobody={"name":"fs","command":"/usr/bin/mcp-fs"}`},
		{"--agent-mcp", `one={"name":"fs","command":"mcp-fs"}`},
		{"--agent-mcp", `one={"command":"/usr/bin/mcp-fs"}`},
		{"--agent-mcp", `one={"type":"ws","name":"x","url":"https://a"}`},
		{"--agent-mcp", `one={"type":"http","name":"x","url":"file:///etc/passwd"}`},
		{"--agent-mcp", `one={"name":"fs","command":"/a","envs":[]}`},
		{"--agent-mcp", `one={"name":"fs","command":"/a"}`, "--agent-mcp", `one={"name":"fs","command":"/b"}`},
	} {
		_, err := parseServe(append([]string{"--store", "memory:", "--agent", "one=/bin/one"}, args...), io.Discard)
		if err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	// A server the config file gives that is refused is named, without
	// its secrets.
	path := writeTemp(t, "gateway.yaml", `agent: {one: /bin/one}
agent-mcp:
  one: [{type: http, name: x, url: "ftp://h", headers: [{name: Authorization, value: Bearer s3cret}]}]
`)
	_, err := parseServe([]string{"--store", "memory:", "--config", path}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"x"`) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a refused server: %v", err)
	}
}
