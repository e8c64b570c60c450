// Package deploy_test checks the deployment files of deploy/, which no
// container engine or cluster runs here: the Dockerfile (parsed with the
// BuildKit parser and linter), the Kubernetes manifests (rendered with
// kustomize's own library and decoded strictly into the typed Kubernetes
// API objects), the Prometheus configuration and alerting rules (promtool),
// and the Grafana dashboard (its PromQL parsed and checked against the
// metrics of a live gateway). Where the files name the binary's flags,
// ports, paths or user, the tests check them against the real binary.
package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// workDir holds what the tests build; TestMain removes it.
var (
	workDirOnce sync.Once
	workDirPath string
	workDirErr  error
)

func workDir() (string, error) {
	workDirOnce.Do(func() { workDirPath, workDirErr = os.MkdirTemp("", "acp-gateway-deploy") })
	return workDirPath, workDirErr
}

func TestMain(m *testing.M) {
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

// repo returns a path of the repository (the tests run in deploy/).
func repo(parts ...string) string {
	return filepath.Join(append([]string{".."}, parts...)...)
}

// buildGateway builds cmd/acp-gateway once.
var buildGateway = sync.OnceValues(func() (string, error) {
	dir, err := workDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "acp-gateway")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/acp-gateway")
	cmd.Dir = repo()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building acp-gateway: %v\n%s", err, out)
	}
	return bin, nil
})

func gatewayBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildGateway()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// serveFlags are the flags of `acp-gateway serve`, read from its --help:
// name to whether it is a boolean flag (one that takes no separate value).
var serveFlags = sync.OnceValues(func() (map[string]bool, error) {
	bin, err := buildGateway()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("acp-gateway serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		// flag.PrintDefaults: "  -name type" or, for a boolean, "  -name".
		if !strings.HasPrefix(line, "  -") {
			continue
		}
		fields := strings.Fields(line)
		flags[strings.TrimPrefix(fields[0], "-")] = len(fields) == 1
	}
	if len(flags) < 10 || !flags["console"] || flags["listen"] {
		return nil, fmt.Errorf("acp-gateway serve --help: could not read its flags from:\n%s", out)
	}
	return flags, nil
})

func knownServeFlags(t *testing.T) map[string]bool {
	t.Helper()
	flags, err := serveFlags()
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

// parseServeArgs parses the arguments after `serve` as the flag package
// would, into each flag's values in order; an unknown flag or a positional
// argument is an error.
func parseServeArgs(flags map[string]bool, args []string) (map[string][]string, error) {
	got := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			return nil, fmt.Errorf("argument %q is not a flag (serve takes none)", a)
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		isBool, ok := flags[name]
		if !ok {
			return nil, fmt.Errorf("flag --%s: acp-gateway serve has no such flag", name)
		}
		if !hasValue {
			if isBool {
				value = "true"
			} else {
				if i+1 == len(args) {
					return nil, fmt.Errorf("flag --%s needs a value", name)
				}
				i++
				value = args[i]
			}
		}
		got[name] = append(got[name], value)
	}
	return got, nil
}

// last returns the last value of a flag (the one in force for a
// non-repeatable flag) and whether it was given.
func last(values map[string][]string, name string) (string, bool) {
	v := values[name]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// portOf returns the port of a HOST:PORT address.
func portOf(t *testing.T, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		t.Fatalf("%s %q: bad port", what, addr)
	}
	return int32(n)
}

// gateway is a running acp-gateway serve process.
type gateway struct {
	base    string // http://HOST:PORT
	metrics string // the --metrics-listen base URL, if one was given
	cmd     *exec.Cmd
	done    chan error
	logs    *testutil.SyncBuffer // stdout and stderr
	stopped bool
	stopErr error
}

// startGateway runs `acp-gateway serve args...` and waits until it serves,
// reading the addresses it listens on from its "serving" log lines. The
// process is stopped (SIGTERM) when the test ends unless stop was called.
func startGateway(t *testing.T, dir string, args ...string) *gateway {
	t.Helper()
	bin := gatewayBinary(t)
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{cmd: cmd, done: make(chan error, 1), logs: &testutil.SyncBuffer{}}
	cmd.Stderr = g.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type addrs struct{ serving, metrics string }
	found := make(chan addrs, 1)
	wantMetrics := false
	for _, a := range args {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "metrics-listen") {
			wantMetrics = true
		}
	}
	go func() {
		var got addrs
		sent := false
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			g.logs.Write(append(append([]byte(nil), sc.Bytes()...), '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "serving":
				got.serving = rec.Addr
			case "serving metrics":
				got.metrics = rec.Addr
			}
			if !sent && got.serving != "" && (!wantMetrics || got.metrics != "") {
				found <- got
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		g.done <- cmd.Wait()
	}()
	t.Cleanup(func() { g.stop(t) })
	select {
	case a := <-found:
		g.base = "http://" + a.serving
		if a.metrics != "" {
			g.metrics = "http://" + a.metrics
		}
	case err := <-g.done:
		g.done <- err
		t.Fatalf("acp-gateway serve %q exited before serving: %v\n%s", args, err, g.output())
	case <-time.After(20 * time.Second):
		t.Fatalf("acp-gateway serve %q did not log \"serving\" in 20s\n%s", args, g.output())
	}
	return g
}

func (g *gateway) output() string { return g.logs.String() }

// stop sends SIGTERM and returns the exit error; a gateway still running
// 30 s later is killed.
func (g *gateway) stop(t *testing.T) error {
	t.Helper()
	if g.stopped {
		return g.stopErr
	}
	g.stopped = true
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case g.stopErr = <-g.done:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		g.stopErr = fmt.Errorf("still running 30s after SIGTERM (killed: %v)", <-g.done)
	}
	return g.stopErr
}

// get fetches url and returns its status and body.
func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, body, err
}
