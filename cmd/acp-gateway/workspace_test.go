package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// With authentication, serve wants a workspace root or the explicit
// opt-out, and says which.
func TestAuthNeedsAWorkspaceRootOrAnyCwd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, auth := range [][]string{{"--auth-tokens", filepath.Join(dir, "tokens")}, {"--oidc-issuer", "https://issuer.example", "--oidc-audience", "acp"}} {
		_, err := parseServe(auth, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--workspace-root DIR") || !strings.Contains(err.Error(), "--any-cwd") {
			t.Errorf("serve %q: %v; want an error naming --workspace-root DIR and --any-cwd", auth, err)
		}
		var stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"serve"}, auth...), io.Discard, &stderr); code != exitUsage ||
			strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "--workspace-root") {
			t.Errorf("serve %q: exit %d, %q; want %d and one line naming --workspace-root", auth, code, stderr.String(), exitUsage)
		}
		for _, fix := range [][]string{{"--any-cwd"}, {"--workspace-root", filepath.Join(dir, "ws")}} {
			cfg, err := parseServe(append(append([]string{}, auth...), fix...), io.Discard)
			if err != nil {
				t.Errorf("serve %q %q: %v", auth, fix, err)
				continue
			}
			if cfg.anyCwd != (fix[0] == "--any-cwd") || (cfg.workspaceRoot != "") == (fix[0] == "--any-cwd") {
				t.Errorf("serve %q %q: any-cwd %v, workspace-root %q", auth, fix, cfg.anyCwd, cfg.workspaceRoot)
			}
		}
	}
	// The config file sets them too.
	conf := writeTemp(t, "gateway.yaml", "auth-tokens: /etc/tokens\nworkspace-root: /srv/ws\n")
	if cfg, err := parseServe([]string{"--config", conf}, io.Discard); err != nil || cfg.workspaceRoot != "/srv/ws" {
		t.Errorf("workspace-root from --config: %v", err)
	}
	conf = writeTemp(t, "gateway.yaml", "auth-tokens: /etc/tokens\nany-cwd: true\n")
	if cfg, err := parseServe([]string{"--config", conf}, io.Discard); err != nil || !cfg.anyCwd {
		t.Errorf("any-cwd from --config: %v", err)
	}
	// Without authentication nothing is needed.
	if _, err := parseServe(nil, io.Discard); err != nil {
		t.Errorf("serve without authentication: %v", err)
	}
}

// serveLogs runs serve with args until ctx ends and returns its address
// and its log, and a channel with its exit status.
func serveLogs(t *testing.T, ctx context.Context, args ...string) (string, *testutil.SyncBuffer, <-chan int) {
	t.Helper()
	serveNeeds(t, args)
	logs := &testutil.SyncBuffer{}
	exited := make(chan int, 1)
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--store", "memory:"}, args...)
	go func() { exited <- run(ctx, args, logs, io.Discard) }()
	var addr string
	testutil.WaitFor(t, "the serving log line", func() bool {
		addr, _ = logLine(logs, "serving")["addr"].(string)
		return addr != ""
	})
	return addr, logs, exited
}

// logLine returns the first log line with message msg (nil when none).
func logLine(logs *testutil.SyncBuffer, msg string) map[string]any {
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	return nil
}

func TestServeConfinesUsersToTheWorkspaceRoot(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tokens, ws := writeTemp(t, "tokens", "tok-alice-0123456789 alice\ntok-bob-0123456789 bob\n"), filepath.Join(dir, "ws")
	for _, d := range []string{filepath.Join(ws, "alice", "proj"), filepath.Join(ws, "bob", "proj")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, logs, exited := serveLogs(t, ctx, "--auth-tokens", tokens, "--workspace-root", ws)
	defer stopServe(t, cancel, exited)
	if l := logLine(logs, "serving"); l["workspace_root"] != ws || l["cwd_confined"] != true {
		t.Errorf("the serving line says workspace root %v, cwd confined %v; want %s, true", l["workspace_root"], l["cwd_confined"], ws)
	}
	alice := bridge.NewClient(http.DefaultClient, "http://"+addr, "tok-alice-0123456789")
	create := func(cwd string) (string, error) {
		res, err := alice.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: cwd}))
		if err != nil {
			return "", err
		}
		return res.Msg.GetSessionId(), nil
	}
	var denied []string
	for _, cwd := range []string{"/", filepath.Join(ws, "bob", "proj"), filepath.Join(ws, "bob", "none"), filepath.Join(ws, "alice", "..", "bob")} {
		_, err := create(cwd)
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("CreateSession(cwd %q): %v, want permission_denied", cwd, err)
		} else {
			denied = append(denied, err.Error())
		}
	}
	for _, d := range denied[1:] {
		if d != denied[0] {
			t.Errorf("refusals differ: %q and %q", d, denied[0])
		}
	}
	if _, err := create(filepath.Join(ws, "alice", "proj")); err != nil {
		t.Errorf("CreateSession in her own directory: %v", err)
	}
	id, err := create("")
	if err != nil {
		t.Fatalf("CreateSession with an empty cwd: %v", err)
	}
	if got, want := cwdOf(t, alice, id), filepath.Join(ws, "alice", id); got != want {
		t.Errorf("the new session's cwd %q, want %q", got, want)
	}
}

func cwdOf(t *testing.T, c acpv2connect.SessionServiceClient, id string) string {
	t.Helper()
	res, err := c.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession().GetCwd()
}

func TestServeWithoutAuthMakesWorkspacesForEmptyCwds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, logs, exited := serveLogs(t, ctx)
	defer stopServe(t, cancel, exited)
	root, err := filepath.EvalSymlinks(defaultWorkspaceRoot()) // under TestMain's $XDG_STATE_HOME
	if err != nil {
		t.Fatal(err)
	}
	if l := logLine(logs, "serving"); l["workspace_root"] != root || l["cwd_confined"] != false {
		t.Errorf("the serving line says workspace root %v, cwd confined %v; want %s, false", l["workspace_root"], l["cwd_confined"], root)
	}
	c := bridge.NewClient(http.DefaultClient, "http://"+addr, "")
	res, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo"}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()
	// The local user's directory is the root itself.
	if got, want := cwdOf(t, c, id), filepath.Join(root, id); got != want {
		t.Errorf("the new session's cwd %q, want %q", got, want)
	}
	// Any directory of the machine will do.
	elsewhere := t.TempDir()
	if res, err = c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: elsewhere})); err != nil {
		t.Fatalf("CreateSession in %s: %v", elsewhere, err)
	}
	if got := cwdOf(t, c, res.Msg.GetSessionId()); got != elsewhere {
		t.Errorf("session cwd %q, want %q", got, elsewhere)
	}
}

func TestServeWithAnyCwdWarns(t *testing.T) {
	t.Parallel()
	tokens := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	ctx, cancel := context.WithCancel(context.Background())
	addr, logs, exited := serveLogs(t, ctx, "--auth-tokens", tokens, "--any-cwd")
	defer stopServe(t, cancel, exited)
	if w := logLine(logs, "--any-cwd: clients' cwd are not confined to their workspace; every user's agent may run in any directory of this host"); w["level"] != "WARN" {
		t.Errorf("no warning about --any-cwd in\n%s", logs)
	}
	if l := logLine(logs, "serving"); l["cwd_confined"] != false {
		t.Errorf("the serving line says cwd confined %v, want false", l["cwd_confined"])
	}
	alice := bridge.NewClient(http.DefaultClient, "http://"+addr, "tok-alice-0123456789")
	elsewhere := t.TempDir()
	if _, err := alice.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: elsewhere})); err != nil {
		t.Errorf("CreateSession anywhere with --any-cwd: %v", err)
	}
}

// Adoption where users are not confined to their directories is the
// unsafe choice, and logged; where they are, nothing is logged.
func TestAdoptionWithoutConfinementIsLogged(t *testing.T) {
	t.Parallel()
	tokens := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--any-cwd"}, true},
		{[]string{"--workspace-root", t.TempDir()}, false},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		_, logs, exited := serveLogs(t, ctx, append([]string{"--auth-tokens", tokens, "--sandbox", "none", "--adopt-agent-sessions"}, c.args...)...)
		if got := logLine(logs, adoptUnconfinedWarning) != nil; got != c.warn {
			t.Errorf("%v: warned %v, want %v", c.args, got, c.warn)
		}
		stopServe(t, cancel, exited)
	}
}
