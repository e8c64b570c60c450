// Package integration runs the real acp-gateway binary: several replicas on
// one Redis, real ACP agents from the SDKs' registries, and real Connect,
// gRPC and gRPC-Web clients.
//
// What the tests need beyond Go (scripts/deps.sh sets it up) is found, or
// built once per test binary, by the helpers here; a missing tool fails the
// test with a message naming it and the command that sets it up.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

const (
	// nodeDir is the npm project of the packages the tests run.
	nodeDir = "node"
	// claudeDir is the npm project of Claude Code's ACP adapter.
	claudeDir = "claude-agent"
	// setUp is the command that installs everything the tests need.
	setUp = "scripts/deps.sh"
	// npmSetUp installs the npm packages alone, from the repository root.
	npmSetUp = "npm ci --prefix integration/node"

	// goAgentPackage is the Go SDK's example agent.
	goAgentPackage = "github.com/coder/acp-go-sdk/example/agent@v0.13.0"
	// grpcurlPackage is grpcurl (Debian 12 does not package it).
	grpcurlPackage = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"
)

// workDir is a directory for what the tests build, made on first use;
// TestMain removes it.
var workDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "acp-gateway-integration")
	workDirPath = dir
	return dir, err
})

var workDirPath string

func TestMain(m *testing.M) {
	testutil.SlowPackage("the integration tests build the binary and run it with Node, the SDKs' agents, grpcurl and Redis")
	// The gateways' default directories (the workspace root of sessions
	// created without a cwd) go to the work directory, not to the home of
	// whoever runs the tests.
	dir, err := workDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	code := m.Run()
	if workDirPath != "" {
		os.RemoveAll(workDirPath)
	}
	os.Exit(code)
}

// buildBinary builds the acp-gateway binary once, when a test first needs
// it (a benchmark-only run builds nothing).
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := workDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "acp-gateway")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/acp-gateway").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building acp-gateway: %v\n%s", err, out)
	}
	return bin, nil
})

// goInstall builds pkg (path@version) with `go install` into a directory of
// its own and returns the binary. The module comes from the module cache,
// or from the Go module proxy when it is not there yet.
func goInstall(pkg string) (string, error) {
	dir, err := workDir()
	if err != nil {
		return "", err
	}
	name := path.Base(strings.SplitN(pkg, "@", 2)[0])
	bin := filepath.Join(dir, "gobin-"+name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", pkg)
	// A pinned path@version builds outside this module: no -mod flags, no
	// workspace.
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v\n%s\nset it up with `go install %s` (%s runs it; it needs the Go module proxy or a module cache that has it)",
			pkg, err, out, pkg, setUp)
	}
	return filepath.Join(bin, name), nil
}

var (
	goAgentBinary = sync.OnceValues(func() (string, error) { return goInstall(goAgentPackage) })
	grpcurlBinary = sync.OnceValues(func() (string, error) { return goInstall(grpcurlPackage) })
)

// tool returns the tool that find finds or builds, failing the test with
// find's error (which names the set-up command) when it is missing.
func tool(t *testing.T, find func() (string, error)) string {
	t.Helper()
	p, err := find()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeBinary finds Node.js (20 or later) on PATH.
var nodeBinary = sync.OnceValues(func() (string, error) {
	hint := fmt.Sprintf("install Node.js 20 or later (Debian: apt-get install nodejs), then run `%s` (%s does both)", npmSetUp, setUp)
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node is not on PATH: %s", hint)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", node, err, hint)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	if major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); major < 20 {
		return "", fmt.Errorf("node %s is too old: %s", v, hint)
	}
	return node, nil
})

// nodeModules checks that integration/node/node_modules holds every package
// integration/node/package.json pins, at its version, and returns the
// node_modules directory (absolute).
var nodeModules = sync.OnceValues(func() (string, error) { return npmModules(nodeDir) })

// claudeModules is nodeModules for integration/claude-agent, the npm
// project of Claude Code's ACP adapter (about 400 MB, so a project of its
// own that only the test of that agent needs).
var claudeModules = sync.OnceValues(func() (string, error) { return npmModules(claudeDir) })

// npmModules checks that dir/node_modules (dir an npm project of
// integration/) holds every package dir/package.json pins, at its version,
// and returns the node_modules directory (absolute).
func npmModules(dir string) (string, error) {
	if _, err := nodeBinary(); err != nil {
		return "", err
	}
	modules, err := filepath.Abs(filepath.Join(dir, "node_modules"))
	if err != nil {
		return "", err
	}
	var pkg struct{ Dependencies map[string]string }
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(raw, &pkg)
	}
	if err != nil {
		return "", fmt.Errorf("reading %s/package.json: %v", dir, err)
	}
	for _, name := range slices.Sorted(maps.Keys(pkg.Dependencies)) {
		want := pkg.Dependencies[name]
		// An alias, "npm:PACKAGE@VERSION", installs PACKAGE as name.
		if alias, ok := strings.CutPrefix(want, "npm:"); ok {
			want = alias[strings.LastIndex(alias, "@")+1:]
		}
		var got struct{ Version string }
		raw, err := os.ReadFile(filepath.Join(modules, name, "package.json"))
		if err == nil {
			err = json.Unmarshal(raw, &got)
		}
		if err != nil || got.Version != want {
			return "", fmt.Errorf("npm package %s@%s is not installed in integration/%s/node_modules (found %q): run `npm ci --prefix integration/%s` (%s runs it)",
				name, want, dir, got.Version, dir, setUp)
		}
	}
	return modules, nil
}

// logBuffer keeps a process's output and reports the address of its
// "serving" log line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	addr    chan string
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		var l struct{ Msg, Addr string }
		if json.Unmarshal(b.partial[:i], &l) == nil && l.Msg == "serving" && l.Addr != "" {
			select {
			case b.addr <- l.Addr:
			default:
			}
		}
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateway is a running `acp-gateway serve`.
type gateway struct {
	base   string
	addr   string
	client acpv2connect.SessionServiceClient
	cmd    *exec.Cmd
	log    *logBuffer
	// freshCwd makes create ask for sessions with an empty cwd, which the
	// gateway gives a new directory of its workspace root, as a gateway
	// that confines cwd to it needs.
	freshCwd bool
}

// startGateway runs `acp-gateway serve --listen 127.0.0.1:0 args...` for the
// test's lifetime. At the end it stops the gateway with SIGTERM, as a
// service manager would, and fails the test if an agent process outlives
// it; the gateway's logs are shown when the test failed, or always with
// ACP_GATEWAY_TEST_LOGS=1.
func startGateway(t *testing.T, args ...string) *gateway {
	t.Helper()
	binary := tool(t, buildBinary)
	g := &gateway{log: &logBuffer{addr: make(chan string, 1)}}
	g.cmd = exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	g.cmd.WaitDelay = 5 * time.Second
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- g.cmd.Wait() }()
	t.Cleanup(func() { g.stop(t, exited) })
	select {
	case g.addr = <-g.log.addr:
	case err := <-exited:
		exited <- err
		t.Fatalf("acp-gateway serve %v exited (%v) before serving:\n%s", args, err, g.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("acp-gateway serve %v did not log its address within 30s:\n%s", args, g.log)
	}
	g.base = "http://" + g.addr
	g.client = acpv2connect.NewSessionServiceClient(http.DefaultClient, g.base, connect.WithProtoJSON())
	return g
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// authenticate makes g's client call with `Authorization: Bearer token`.
func (g *gateway) authenticate(token string) {
	c := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	g.client = acpv2connect.NewSessionServiceClient(c, g.base, connect.WithProtoJSON())
}

// logged returns the gateway's first JSON log line whose msg is msg,
// failing the test when it logged none.
func (g *gateway) logged(t *testing.T, msg string) map[string]any {
	t.Helper()
	for line := range strings.Lines(g.log.String()) {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
			return l
		}
	}
	t.Fatalf("the gateway did not log %q:\n%s", msg, g.log)
	return nil
}

// stop ends the gateway with SIGTERM and checks that its agents went with it.
func (g *gateway) stop(t *testing.T, exited chan error) {
	agents := procfs.Children(g.cmd.Process.Pid)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("acp-gateway ended with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Errorf("acp-gateway did not stop within 20s of SIGTERM")
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range agents {
		for procfs.Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if procfs.Alive(pid) {
			t.Errorf("agent process %d outlived the gateway", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if t.Failed() || os.Getenv("ACP_GATEWAY_TEST_LOGS") != "" {
		t.Logf("acp-gateway's output:\n%s", g.log)
	}
}

// create creates a session of agent in a new directory: one of the
// test's, or with freshCwd one the gateway makes.
func (g *gateway) create(t *testing.T, agent string) string {
	t.Helper()
	var cwd string
	if !g.freshCwd {
		cwd = t.TempDir()
	}
	res, err := g.client.CreateSession(context.Background(),
		connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent, Cwd: cwd}))
	if err != nil {
		t.Fatalf("CreateSession(%s): %v", agent, err)
	}
	return res.Msg.GetSessionId()
}

func (g *gateway) snapshot(t *testing.T, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := g.client.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	return res.Msg.GetSession()
}

// turn streams one Prompt turn, calling react with each event as it
// arrives (react may call the gateway), and returns the turn's events. It
// fails the test unless the stream ends cleanly with turn_ended last.
func (g *gateway) turn(t *testing.T, id, prompt string, react func(*acpv2.SessionEvent)) []*acpv2.SessionEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	events, err := testutil.Turn(ctx, g.client, &acpv2.PromptRequest{SessionId: id, Prompt: text(prompt)}, react)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// watchFrom replays the session's first n events after afterSeq with Watch.
func (g *gateway) watchFrom(t *testing.T, id string, afterSeq uint64, n int) []*acpv2.SessionEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events, err := testutil.Watch(ctx, g.client, id, afterSeq, n)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// runJSON runs cmd (made with exec.CommandContext(ctx, ...)), calling value
// with each JSON value of its stdout as it comes (JSON lines or indented
// JSON alike), and returns an error, with its stderr, unless it succeeds.
func runJSON(ctx context.Context, cmd *exec.Cmd, value func(json.RawMessage) error) error {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	dec := json.NewDecoder(out)
	var lineErr error
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if !errors.Is(err, io.EOF) {
				lineErr = fmt.Errorf("reading %s's output: %w", filepath.Base(cmd.Path), err)
			}
			break
		}
		if err := value(raw); err != nil {
			lineErr = err
			break
		}
	}
	if lineErr != nil {
		_ = cmd.Process.Kill()
	}
	err = cmd.Wait()
	if lineErr != nil {
		return lineErr
	}
	if err != nil {
		return fmt.Errorf("%s: %v (%v)\n%s", strings.Join(cmd.Args, " "), err, ctx.Err(), stderr.String())
	}
	return nil
}
