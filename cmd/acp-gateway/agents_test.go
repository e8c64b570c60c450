package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveAgents(t *testing.T) {
	t.Parallel()
	wd := t.TempDir()
	for path, mode := range map[string]os.FileMode{"bin/agent": 0o755, "lib/agent.js": 0o644, "plain.txt": 0o644, "agent.py": 0o644, "serve": 0o644, "mypkg/__init__.py": 0o644} {
		p := filepath.Join(wd, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	sh, err := resolveProgram("sh", "/")
	if err != nil {
		t.Fatal(err)
	}
	agents := agentFlags{
		"rel":  {"bin/agent", "--flag", "lib/agent.js"},
		"dot":  {"./bin/agent"},
		"path": {"sh", "lib/agent.js", "missing.js", "-c", "/abs"},
		// A bare name: a file's with a dot is a path, a module's or a
		// subcommand's is not.
		"bare": {"sh", "agent.py", "-m", "mypkg", "serve"},
	}
	var logged bytes.Buffer
	if err := resolveAgents(agents, wd, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"rel":  {filepath.Join(wd, "bin/agent"), "--flag", filepath.Join(wd, "lib/agent.js")},
		"dot":  {filepath.Join(wd, "bin/agent")},
		"path": {sh, filepath.Join(wd, "lib/agent.js"), "missing.js", "-c", "/abs"},
		"bare": {sh, filepath.Join(wd, "agent.py"), "-m", "mypkg", "serve"},
	}
	for name, w := range want {
		if got := agents[name]; strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("agent %s: %q, want %q", name, got, w)
		}
	}
	if !filepath.IsAbs(sh) {
		t.Errorf("sh resolved to %q, not absolute", sh)
	}
	if !strings.Contains(logged.String(), "agent=rel") {
		t.Errorf("the rewrites were not logged: %s", logged.String())
	}

	for _, tt := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"no-such-agent-command-xyz"}, "not a command found in PATH"},
		{[]string{"bin/nope"}, "no such file"},
		{[]string{"./plain.txt"}, "not executable"},
		{[]string{"./lib"}, "is a directory"},
	} {
		err := resolveAgents(agentFlags{"ok": {"sh"}, "bad": tt.cmd}, wd, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "--agent bad: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one naming agent bad and saying %q", tt.cmd, err, tt.want)
		}
	}
}

// TestServeChecksAgentsAtStart checks that serve refuses to start with an
// agent whose command does not exist, naming it, rather than failing each
// session later.
func TestServeChecksAgentsAtStart(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--store", "memory:",
		"--agent", "good=sh", "--agent", "typo=nodee agent.js"}, io.Discard, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), `--agent typo: "nodee" is not a command found in PATH`) {
		t.Fatalf("serve exited %d with %q, want %d and the agent named", code, stderr.String(), exitUsage)
	}
}
