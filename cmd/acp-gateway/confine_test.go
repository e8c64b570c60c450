package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
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
