package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
)

func TestSandboxDefaultsToBwrapWithAuthentication(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	ctx, cancel := context.WithCancel(context.Background())
	addr, logs, exited := serveLogs(t, ctx, "--auth-tokens", tokens, "--workspace-root", filepath.Join(dir, "ws"),
		"--sandbox-homes", filepath.Join(dir, "homes"), "--agent-memory", "1GiB", "--agent-pids", "100")
	defer stopServe(t, cancel, exited)
	l := logLine(logs, "agents confined")
	if l["sandbox"] != "bwrap" || l["network"] != "proxy" || !strings.Contains(l["limits"].(string), "memory 1 GiB, 100 processes") {
		t.Errorf("start-up says %v", l)
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, want := range []string{`acp_gateway_agent_sandbox_info{mode="bwrap"} 1`, `acp_gateway_agent_limit{resource="pids"} 100`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestSandboxWithoutAuthenticationIsNone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	_, logs, exited := serveLogs(t, ctx)
	defer stopServe(t, cancel, exited)
	if l := logLine(logs, "agents confined"); l["sandbox"] != "none" {
		t.Errorf("start-up says %v", l)
	}
}

func TestServeRefusesABwrapThatCannotRun(t *testing.T) {
	// PATH has no bwrap (the demo agent is an absolute path).
	t.Setenv("PATH", t.TempDir())
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--store", "memory:", "--sandbox", "bwrap"}, io.Discard, &stderr)
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	msg := stderr.String()
	if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "apt-get install bubblewrap") || !strings.Contains(msg, "--sandbox none") {
		t.Errorf("want one line naming the fix, got %q", msg)
	}
}

func TestConfineFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sandbox", "docker"}, "want bwrap or none"},
		{[]string{"--sandbox", "none", "--sandbox-ro", "/opt"}, "need --sandbox bwrap"},
		{[]string{"--sandbox", "bwrap", "--sandbox-ro", "opt"}, "absolute"},
		{[]string{"--agent-memory", "lots"}, "want a size"},
		{[]string{"--agent-pids", "-1"}, "must not be negative"},
		{[]string{"--sandbox", "bwrap", "--sandbox-network", "open"}, "want proxy or host"},
		{[]string{"--sandbox", "bwrap", "--agent-egress", "localhost"}, "HOST:PORT"},
		{[]string{"--sandbox", "bwrap", "--sandbox-network", "host", "--agent-egress", "localhost:80"}, "needs --sandbox-network proxy"},
		{[]string{"--sandbox", "none", "--agent-egress", "localhost:80"}, "need --sandbox bwrap"},
	} {
		if _, err := parseServe(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
	}
	cfg, err := parseServe([]string{"--agent-memory", "512MiB", "--agent-file-size", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.confine.limits; l.Memory != 512<<20 || l.FileSize != 0 || l.Pids != 1024 {
		t.Errorf("limits %+v", l)
	}
}

// confineFor parses args as serve's confinement flags, on a platform
// whose sandbox support is supported.
func confineFor(t *testing.T, supported error, args ...string) *confineConfig {
	t.Helper()
	var c confineConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.addConfineFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	c.supported = func() error { return supported }
	return &c
}

// A platform without bubblewrap (darwin) refuses --sandbox bwrap, asked
// for or the default with authentication, naming --sandbox none; only that
// explicit choice runs agents unconfined.
func TestSandboxOffLinuxIsRefused(t *testing.T) {
	t.Parallel()
	unsupported := fmt.Errorf("%w, and this gateway runs on darwin", sandbox.ErrUnsupported)
	for _, c := range []struct {
		auth bool
		args []string
		want string
	}{
		{true, nil, "the default with --auth-tokens or --oidc-issuer"},
		{true, []string{"--sandbox", "bwrap"}, "--sandbox bwrap: bubblewrap sandboxes need Linux"},
		{false, []string{"--sandbox", "bwrap"}, "--sandbox bwrap: bubblewrap sandboxes need Linux"},
	} {
		err := confineFor(t, unsupported, c.args...).checkConfine(c.auth)
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "pass --sandbox none") {
			t.Errorf("auth %v %v: got %v, want %q and the fix", c.auth, c.args, err, c.want)
		}
	}
	for _, auth := range []bool{true, false} {
		c := confineFor(t, unsupported, "--sandbox", "none")
		if err := c.checkConfine(auth); err != nil || c.sandbox != sandbox.ModeNone {
			t.Errorf("auth %v, --sandbox none: %v, sandbox %q", auth, err, c.sandbox)
		}
	}
	if c := confineFor(t, unsupported); c.checkConfine(false) != nil || c.sandbox != sandbox.ModeNone {
		t.Errorf("without authentication the default is none, got %q", c.sandbox)
	}
}

// Where the platform enforces no limit (darwin), a gateway without
// authentication logs that its agents run without limits; one with
// authentication refuses to start.
func TestLimitsOffLinux(t *testing.T) {
	t.Parallel()
	setup := func(l limits.Limits) (*limits.Controller, error) {
		if l != (limits.Limits{}) {
			return nil, fmt.Errorf("%w, and this gateway runs on darwin", limits.ErrUnsupported)
		}
		return limits.Setup(l)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	lim, err := setupLimits(limits.Defaults, false, setup, log)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if lim.Limits() != (limits.Limits{}) || !strings.Contains(logs.String(), "agents run without limits") {
		t.Errorf("limits %v, log %q", lim.Limits(), logs.String())
	}
	if _, err := setupLimits(limits.Defaults, true, setup, log); !errors.Is(err, limits.ErrUnsupported) {
		t.Errorf("with authentication: %v, want ErrUnsupported", err)
	}
}
