package session

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// CheckMCPAllow checks the entries of Options.MCPAllow: each an absolute
// path (a stdio MCP server's command, matched exactly) or an http or https
// URL prefix (scheme and host, and optionally a path prefix).
func CheckMCPAllow(entries []string) error {
	for _, e := range entries {
		if filepath.IsAbs(e) {
			if filepath.Clean(e) != e {
				return fmt.Errorf("MCP allow entry %q: give the command's path in its clean form, %q", e, filepath.Clean(e))
			}
			continue
		}
		if _, err := allowURL(e); err != nil {
			return fmt.Errorf("MCP allow entry %q: %v", e, err)
		}
	}
	return nil
}

// allowURL parses an MCP allow entry that is a URL prefix.
func allowURL(e string) (*url.URL, error) {
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("neither an absolute path nor an http or https URL")
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("a URL prefix is a scheme, a host and an optional path")
	case !cleanPath(u):
		return nil, fmt.Errorf("its path has . or .. segments")
	}
	return u, nil
}

// cleanPath says whether u's path has no dot segments, encoded or not,
// which could lead a server out of the path an allow entry names.
func cleanPath(u *url.URL) bool {
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if s, err := url.PathUnescape(seg); err != nil || s == "." || s == ".." || strings.Contains(s, "/") {
			return false
		}
	}
	return true
}

// mcpAllowed says whether an MCP server a client gave is within allow.
func mcpAllowed(allow []string, s agent.MCPServer) bool {
	if s.Transport == agent.MCPStdio {
		for _, e := range allow {
			if filepath.IsAbs(e) && e == s.Command {
				return true
			}
		}
		return false
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.User != nil || !cleanPath(u) {
		return false
	}
	for _, e := range allow {
		a, err := allowURL(e)
		if err != nil || !strings.EqualFold(a.Scheme, u.Scheme) || !strings.EqualFold(a.Host, u.Host) {
			continue
		}
		prefix, p := a.EscapedPath(), u.EscapedPath()
		if prefix == "" || prefix == "/" || p == prefix || strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/") {
			return true
		}
	}
	return false
}

// checkMCP refuses, with ErrInvalid naming it, the first of servers that
// is malformed, not within allow, or named as one of configured is.
func checkMCP(allow []string, configured, servers []agent.MCPServer) error {
	names := map[string]bool{}
	for _, c := range configured {
		names[c.Name] = true
	}
	for _, s := range servers {
		switch {
		case s.Name == "":
			return fmt.Errorf("%w: an MCP server has no name", ErrInvalid)
		case names[s.Name]:
			return fmt.Errorf("%w: two MCP servers are named %q", ErrInvalid, s.Name)
		case s.Transport == agent.MCPStdio && !filepath.IsAbs(s.Command):
			return fmt.Errorf("%w: MCP server %q: command %q is not an absolute path", ErrInvalid, s.Name, s.Command)
		case !mcpAllowed(allow, s):
			return fmt.Errorf("%w: MCP server %q (%s %s) is not allowed on this gateway (see --mcp-allow)", ErrInvalid, s.Name, s.Transport, mcpTarget(s))
		}
		names[s.Name] = true
	}
	return nil
}

// mcpTarget is what a server runs or reaches, without its secrets.
func mcpTarget(s agent.MCPServer) string {
	if s.Transport == agent.MCPStdio {
		return s.Command
	}
	if u, err := url.Parse(s.URL); err == nil {
		u.User, u.RawQuery, u.Fragment = nil, "", ""
		return u.String()
	}
	return "with a malformed URL"
}

// encodeMCP encodes the servers a client gave for the session's record.
func encodeMCP(servers []agent.MCPServer) []byte {
	if len(servers) == 0 {
		return nil
	}
	b, _ := json.Marshal(servers) // strings and slices of them: cannot fail
	return b
}

// decodeMCP reads back the servers of a session's record.
func decodeMCP(b []byte) ([]agent.MCPServer, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var servers []agent.MCPServer
	if err := json.Unmarshal(b, &servers); err != nil {
		return nil, fmt.Errorf("the session's MCP servers: %w", err)
	}
	return servers, nil
}

// mcpServers returns the MCP servers s's agent is given: the agent's
// configured ones, then those its client gave, which must still be
// allowed (the allowlist may have narrowed since).
func (m *Manager) mcpServers(s *Session) ([]agent.MCPServer, error) {
	given, err := decodeMCP(s.rec.MCPServers)
	if err != nil {
		return nil, err
	}
	for _, g := range given {
		if !mcpAllowed(m.opts.MCPAllow, g) {
			return nil, fmt.Errorf("%w: MCP server %q (%s %s) is no longer allowed on this gateway", ErrPermission, g.Name, g.Transport, mcpTarget(g))
		}
	}
	configured := m.opts.AgentMCP[s.rec.Agent]
	return append(append(make([]agent.MCPServer, 0, len(configured)+len(given)), configured...), given...), nil
}
