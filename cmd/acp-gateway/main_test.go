package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/kballard/go-shellquote"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage"},
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown flag", []string{"serve", "--nope"}, "nope"},
		{"bad listen", []string{"serve", "--listen", "nocolon"}, "--listen"},
		{"agent without =", []string{"serve", "--agent", "x"}, "NAME=COMMAND_LINE"},
		{"agent empty command", []string{"serve", "--agent", "x="}, "empty command line"},
		{"agent bad quoting", []string{"serve", "--agent", `x=node "agent.js`}, `agent "x"`},
		{"agent twice", []string{"serve", "--agent", "x=a", "--agent", "x=b"}, "given twice"},
		{"unsupported store", []string{"serve", "--store", "etcd://x"}, "--store"},
		{"bolt without path", []string{"serve", "--store", "bolt:"}, "file path"},
		{"bad redis db", []string{"serve", "--store", "redis://127.0.0.1:6379/abc"}, "--store"},
		{"negative retention", []string{"serve", "--max-events", "-1"}, "--max-events"},
		{"negative byte retention", []string{"serve", "--max-event-bytes", "-1"}, "--max-event-bytes"},
		{"short lease", []string{"serve", "--lease-ttl", "1ms"}, "--lease-ttl"},
		{"zero forward timeout", []string{"serve", "--forward-timeout", "0s"}, "--forward-timeout"},
		{"negative drain", []string{"serve", "--shutdown-drain", "-1s"}, "--shutdown-drain"},
		{"negative stream write timeout", []string{"serve", "--stream-write-timeout", "-1s"}, "--stream-write-timeout"},
		{"stray argument", []string{"serve", "extra"}, "no arguments"},
		{"wildcard cors", []string{"serve", "--cors-origin", "*"}, "wildcard"},
		{"unauthenticated on every interface", []string{"serve", "--listen", "0.0.0.0:8080"}, "--insecure-no-auth"},
		{"unauthenticated on every interface, no host", []string{"serve", "--listen", ":8080"}, "--insecure-no-auth"},
		{"unauthenticated on a LAN address", []string{"serve", "--listen", "192.168.1.5:8080"}, "--insecure-no-auth"},
		{"insecure with authentication", []string{"serve", "--auth-tokens", "tokens", "--insecure-no-auth"}, "drop --insecure-no-auth"},
		{"negative body timeout", []string{"serve", "--request-body-timeout", "-1s"}, "--request-body-timeout"},
		{"negative idle timeout", []string{"serve", "--conn-idle-timeout", "-1s"}, "--conn-idle-timeout"},
		{"negative connection limit", []string{"serve", "--max-connections", "-1"}, "--max-connections"},
		{"negative stream limit", []string{"serve", "--max-streams-per-user", "-1"}, "--max-streams-per-user"},
		{"allowed host with a port", []string{"serve", "--allowed-host", "gw.example.com:8080"}, "give the host alone"},
		{"allowed host as a URL", []string{"serve", "--allowed-host", "http://gw.example.com"}, "--allowed-host"},
		{"bad heartbeat", []string{"serve", "--heartbeat", "0s"}, "--heartbeat"},
		{"bad metrics listen", []string{"serve", "--metrics-listen", "x"}, "--metrics-listen"},
		{"negative session series", []string{"serve", "--session-metrics-max", "-2"}, "--session-metrics-max"},
		{"redis prefix without redis", []string{"serve", "--store", "memory:", "--redis-prefix", "x:"}, "--redis-prefix"},
		{"redis prefix with braces", []string{"serve", "--store", "redis://127.0.0.1:6379/9", "--redis-prefix", "a{b}:"}, "--redis-prefix"},
		{"zero watch buffer", []string{"serve", "--watch-buffer", "0"}, "--watch-buffer"},
		{"version with an argument", []string{"version", "x"}, "takes no arguments"},
		{"try with a relative cwd", []string{"try", "--cwd", "work"}, "--cwd must be an absolute path"},
		{"try with two tokens", []string{"try", "--token", "a", "--token-file", "f"}, "at most one of --token and --token-file"},
		{"try with an argument", []string{"try", "extra"}, "takes no arguments"},
		{"bench, which left the binary", []string{"bench", "--quick"}, "its own command now, with the same flags: acp-gateway-bench"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			first, _, _ := strings.Cut(stderr.String(), "\n")
			if !strings.Contains(first, tc.want) {
				t.Fatalf("first stderr line %q does not name %q", first, tc.want)
			}
		})
	}
}

// The bench is a command of its own: this binary links none of it (nor
// the deploy tests' libraries, which live in deploy's own module).
func TestBinaryCarriesNoBench(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, "github.com/acp-gateway/acp-gateway/gateway/app") {
		t.Fatalf("go list -deps listed %d packages, not the binary's: %q", len(deps), deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/acp-gateway/acp-gateway/internal/bench") || strings.HasPrefix(d, "github.com/acp-gateway/acp-gateway/gateway/bench") {
			t.Errorf("the binary links %s", d)
		}
	}
}

func TestAgentCommandLineIsSplitLikeAShell(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe([]string{"--agent", `ts=node "/opt/my agent/agent.js" --flag='a b'`, "--agent", "go=/bin/agent"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node", "/opt/my agent/agent.js", "--flag=a b"}
	if got := cfg.agents["ts"]; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q want %q", got, want)
	}
	if got := cfg.agents["go"]; len(got) != 1 || got[0] != "/bin/agent" {
		t.Fatalf("got %q", got)
	}
}

func TestServeAnswersOnEveryProtocol(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx)
	base := "http://" + addr

	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	for name, client := range map[string]acpv2connect.SessionServiceClient{
		"connect":  acpv2connect.NewSessionServiceClient(http.DefaultClient, base),
		"grpc":     acpv2connect.NewSessionServiceClient(h2, base, connect.WithGRPC()),
		"grpc-web": acpv2connect.NewSessionServiceClient(http.DefaultClient, base, connect.WithGRPCWeb()),
	} {
		_, err := client.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: "s"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s: GetSession of an unknown session: err = %v, want not_found", name, err)
		}
	}

	stopServe(t, cancel, exited)
}

func TestMain(m *testing.M) {
	egress.ListenIfCommanded()
	agentsim.ServeIfCommanded()
	// serve runs the demo agent as this executable's demo-agent command.
	if len(os.Args) > 1 && os.Args[1] == "demo-agent" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// serve's default directories (the workspace root) go to a temporary
	// directory, not to the home of whoever runs the tests.
	state, err := os.MkdirTemp("", "acp-gateway-state")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_STATE_HOME", state)
	code := m.Run()
	os.RemoveAll(state)
	os.Exit(code)
}

func TestTryPlaysTheDemoTurn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx)

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"try", "--url", "http://" + addr, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("try --json exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{`"turnStarted"`, `"plan"`, `"toolCallUpdate"`, `"toolCall"`, `"permissionRequest"`,
		`# answering perm-`, `with "allow-once"`, `"selectedOptionId":"allow-once"`, `"diff"`, `"stopReason":"end_turn"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("try --json output lacks %s", want)
		}
	}

	// By default, the turn for a person: no JSON, the text whole, each
	// tool call's status on a line, the diff, the permission asked and
	// answered.
	out.Reset()
	if code := run(ctx, []string{"try", "--url", "http://" + addr}, &out, &errOut); code != 0 {
		t.Fatalf("try exited %d: %s", code, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		"> Show me what you can do.\n",
		"\n" + agentsim.DemoDisclaimer,
		"I'll show a file being read, an edit that asks your permission, and a command's output.\n",
		"plan:\n  [ ] Read README.md to learn about the project\n",
		"\n* Read README.md (read): pending\n* Read README.md (read): in_progress\n* Read README.md (read): completed\n  | # Demo project\n",
		"plan: [x] Read README.md to learn about the project\n",
		"/hello.go\n@@ -3,5 +3,5 @@\n import \"fmt\"\n \n func main() {\n-\tfmt.Println(\"hello\")\n+\tfmt.Println(\"hello, ACP gateway!\")\n }\n",
		"? permission asked: Edit hello.go [Allow once / Always allow edits / Reject]\n  answering: Allow once\n  permission answered: Allow once (allow-once), by user\n",
		"* Run go test ./... (execute): completed\n  | === RUN   TestGreeting\n",
		"\nturn ended: end_turn\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("try output lacks %q", want)
		}
	}
	if strings.Contains(text, `{"`) || strings.Count(text, "Edit hello.go (edit): completed") != 1 {
		t.Errorf("try output has JSON, or a tool call's line repeated:\n%s", text)
	}
	stopServe(t, cancel, exited)
}

// writeTemp writes content to the file name in a new directory of the
// test's and returns its path.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe runs `serve` on a loopback port until ctx ends, with a bolt
// store in a new temporary directory unless args name another store. It
// returns the address from the serve log line and a channel with serve's
// exit status.
func startServe(t *testing.T, ctx context.Context, args ...string) (string, <-chan int) {
	t.Helper()
	serveNeeds(t, args)
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--store", "bolt:" + filepath.Join(t.TempDir(), "s.db")}, args...)
	go func() {
		exited <- run(ctx, args, pw, io.Discard)
		pw.Close()
	}()
	// Lines before the one naming the address (warnings) are skipped.
	dec := json.NewDecoder(bufio.NewReader(pr))
	var line struct{ Addr string }
	for line.Addr == "" {
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("no listen log line: %v", err)
		}
	}
	go io.Copy(io.Discard, io.MultiReader(dec.Buffered(), pr))
	return line.Addr, exited
}

// serveNeeds skips the test in short mode when `serve` with args needs
// more than Go: a Redis store, or bubblewrap, which authentication
// sandboxes agents with unless --sandbox says otherwise.
func serveNeeds(t *testing.T, args []string) {
	t.Helper()
	sandbox, auth := false, false
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "redis://"):
			testutil.Needs(t, "redis")
		case a == "--sandbox" || strings.HasPrefix(a, "--sandbox="):
			sandbox = true
		case strings.HasPrefix(a, "--auth-tokens"), strings.HasPrefix(a, "--oidc-issuer"):
			auth = true
		}
	}
	if auth && !sandbox {
		testutil.Needs(t, "bwrap")
	}
}

// stopServe ends a serve startServe started, by cancelling its context,
// and checks that it exits cleanly.
func stopServe(t *testing.T, cancel context.CancelFunc, exited <-chan int) {
	t.Helper()
	cancel()
	waitExit(t, exited, 10*time.Second)
}

// waitExit checks that serve exits cleanly within d.
func waitExit(t *testing.T, exited <-chan int, d time.Duration) {
	t.Helper()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited %d after shutdown", code)
		}
	case <-time.After(d):
		t.Fatal("serve did not stop after its context ended")
	}
}

func TestBadRedisURLNeverShowsItsPassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"redis://u:s3cret@h:6379/%zz", "redis://u:s3cret@h:6379/abc"} {
		var stderr bytes.Buffer
		if code := run(context.Background(), []string{"serve", "--store", url}, io.Discard, &stderr); code != exitUsage {
			t.Fatalf("%s: exit %d, want %d", url, code, exitUsage)
		}
		if strings.Contains(stderr.String(), "s3cret") || !strings.Contains(stderr.String(), "--store") {
			t.Fatalf("%s: stderr %q shows the password or does not name --store", url, stderr.String())
		}
	}
}

func TestMetricsOnTheMainAndTheMetricsListener(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", "memory:"}, pw, io.Discard)
		pw.Close()
	}()
	addrs := map[string]string{}
	dec := json.NewDecoder(bufio.NewReader(pr))
	for len(addrs) < 2 {
		var line struct{ Msg, Addr string }
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("log lines: %v (have %v)", err, addrs)
		}
		if line.Addr != "" {
			addrs[line.Msg] = line.Addr
		}
	}
	go io.Copy(io.Discard, pr)
	for _, addr := range []string{addrs["serving"], addrs["serving metrics"]} {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("acp_gateway_build_info")) {
			t.Fatalf("GET %s/metrics: %s without acp_gateway_build_info", addr, resp.Status)
		}
	}
	// The metrics listener serves nothing else.
	resp, err := http.Get("http://" + addrs["serving metrics"] + "/acp.v2.SessionService/ListSessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("the metrics listener answered an RPC path with %s", resp.Status)
	}
	stopServe(t, cancel, exited)
}

// The watch buffer's flags reach the session manager.
func TestWatchBufferFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe([]string{"--store", "memory:", "--watch-buffer", "128", "--watch-buffer-bytes", "4096"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.sessionOptions(nil, nil, "", &confinement{}); o.WatchBuffer != 128 || o.WatchBufferBytes != 4096 {
		t.Errorf("session options: watch buffer %d events, %d bytes", o.WatchBuffer, o.WatchBufferBytes)
	}
}

// The bounds on what one agent makes a session and the store hold reach
// the session manager: by default as the defaults, a flag's value as it
// is, and a flag's zero as no bound (which the options write as less
// than zero, their zero being the default).
func TestAgentBoundFlags(t *testing.T) {
	t.Parallel()
	type bounds struct {
		calls, perms, lines, bytes int
		store                      int64
	}
	for _, tc := range []struct {
		args []string
		want bounds
	}{
		{nil, bounds{session.DefaultMaxToolCalls, session.DefaultMaxPendingPermissions, agent.DefaultStderrLines, agent.DefaultStderrBytes, session.DefaultMaxStoreBytes}},
		{[]string{"--max-tool-calls", "5", "--max-pending-permissions", "2", "--agent-stderr-lines", "7", "--agent-stderr-bytes", "900", "--max-store-bytes", "4096"},
			bounds{5, 2, 7, 900, 4096}},
		{[]string{"--max-tool-calls", "0", "--max-pending-permissions", "0", "--agent-stderr-lines", "0", "--agent-stderr-bytes", "0", "--max-store-bytes", "0"},
			bounds{-1, -1, -1, -1, 0}},
	} {
		cfg, err := parseServe(append([]string{"--store", "memory:"}, tc.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		o := cfg.sessionOptions(nil, nil, "", &confinement{})
		if got := (bounds{o.MaxToolCalls, o.MaxPendingPermissions, o.AgentStderrLines, o.AgentStderrBytes, o.MaxStoreBytes}); got != tc.want {
			t.Errorf("%q: session options %+v, want %+v", tc.args, got, tc.want)
		}
	}
	for _, flag := range []string{"--max-tool-calls", "--max-pending-permissions", "--agent-stderr-lines", "--agent-stderr-bytes", "--max-store-bytes"} {
		if _, err := parseServe([]string{"--store", "memory:", flag, "-1"}, io.Discard); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s -1: %v, want refused", flag, err)
		}
	}
}

func TestConfigFileSetsWhatFlagsDoNot(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, "gateway.yaml", `listen: 127.0.0.1:9999
store: "memory:"
max-sessions: 7
agent:
  one: /bin/one --flag "a b"
  two: /bin/two
cors-origin: [https://a.example, https://b.example]
`)
	cfg, err := parseServe([]string{"--config", path, "--listen", "127.0.0.1:7777"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:7777" {
		t.Errorf("listen %q: the flag should win over the file", cfg.listen)
	}
	if cfg.store != "memory:" || cfg.maxSessions != 7 {
		t.Errorf("store %q, max-sessions %d: not taken from the file", cfg.store, cfg.maxSessions)
	}
	if got := strings.Join(cfg.agents["one"], "|"); got != "/bin/one|--flag|a b" || len(cfg.agents) != 2 {
		t.Errorf("agents %q", cfg.agents)
	}
	if got := strings.Join(cfg.corsOrigins, " "); got != "https://a.example https://b.example" {
		t.Errorf("cors origins %q", got)
	}
}

func TestBadConfigAndAuthFilesExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() // holds nothing: its files are missing
	unknown := writeTemp(t, "unknown.yaml", "listen: 127.0.0.1:0\nlsiten: x\n")
	badValue := writeTemp(t, "bad.yaml", "max-sessions: many\n")
	notYAML := writeTemp(t, "broken.yaml", "listen: [\n")
	badTokens := writeTemp(t, "tokens", "only-one-field\n")
	shortToken := writeTemp(t, "short-tokens", "# one too short\nlong-enough-0123456789 alice\nonly-one-f bob\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown config key", []string{"serve", "--config", unknown}, `unknown setting "lsiten"`},
		{"bad config value", []string{"serve", "--config", badValue}, "max-sessions"},
		{"config not YAML", []string{"serve", "--config", notYAML}, "--config"},
		{"missing config", []string{"serve", "--config", filepath.Join(dir, "none.yaml")}, "--config"},
		{"bad token file", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--auth-tokens", badTokens, "--any-cwd"}, "--auth-tokens"},
		{"short token", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--auth-tokens", shortToken, "--any-cwd"}, shortToken + ":3: the token is 10 bytes; a token needs at least 16"},
		{"missing token file", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--auth-tokens", filepath.Join(dir, "none"), "--any-cwd"}, "--auth-tokens"},
		{"missing jwks file", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--oidc-issuer", "https://issuer.example",
			"--oidc-audience", "acp", "--oidc-jwks-file", filepath.Join(dir, "none.json"), "--any-cwd"}, "--oidc-issuer"},
		{"jwks without issuer", []string{"serve", "--oidc-jwks-file", "x"}, "--oidc-issuer"},
		{"issuer without audience", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--oidc-issuer", "https://issuer.example", "--any-cwd"},
			"--oidc-issuer needs --oidc-audience AUDIENCE"},
		{"audience and any audience", []string{"serve", "--oidc-issuer", "https://issuer.example", "--oidc-audience", "acp", "--oidc-any-audience"}, "not both"},
		{"small request limit", []string{"serve", "--max-request-bytes", "10"}, "--max-request-bytes"},
		{"negative rate", []string{"serve", "--rate-limit", "-1"}, "--rate-limit"},
		{"bad otlp endpoint", []string{"serve", "--store", "memory:", "--listen", "127.0.0.1:0", "--otlp-endpoint", "collector:4318"}, "OTLP endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			// A serve that wrongly starts ends with the context, and fails.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if code := run(ctx, tc.args, io.Discard, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			first, _, _ := strings.Cut(stderr.String(), "\n")
			if !strings.Contains(first, tc.want) {
				t.Fatalf("first stderr line %q does not name %q", first, tc.want)
			}
			if strings.Contains(stderr.String(), "only-one-f") {
				t.Fatalf("stderr shows the token file's content: %q", stderr.String())
			}
		})
	}
}

func TestConsoleIsServedAtTheRoot(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		addr, exited := startServe(t, ctx, "--console="+strconv.FormatBool(on))
		resp, err := http.Get("http://" + addr + "/console/config.json")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if on && (resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"demo"`))) {
			t.Errorf("console on: config.json %s %s, want the demo agent listed", resp.Status, body)
		}
		if !on && resp.StatusCode != http.StatusNotFound {
			t.Errorf("--console=false: config.json %s, want 404", resp.Status)
		}
		stopServe(t, cancel, exited)
	}
}

// TestACPEndpointIsOnByDefault: serve speaks ACP at /acp unless --acp=false.
func TestACPEndpointIsOnByDefault(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--console=false"}, {"--console=false", "--acp=false"}} {
		ctx, cancel := context.WithCancel(context.Background())
		addr, exited := startServe(t, ctx, args...)
		resp, err := http.Post("http://"+addr+"/acp/demo", "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		on := len(args) == 1
		if on && (resp.StatusCode != http.StatusOK || resp.Header.Get("Acp-Connection-Id") == "") {
			t.Errorf("%v: initialize at /acp/demo: %s, want 200 with an Acp-Connection-Id", args, resp.Status)
		}
		if !on && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%v: /acp/demo %s, want 404", args, resp.Status)
		}
		stopServe(t, cancel, exited)
	}
}

// With --redis-prefix the gateway keeps its sessions under that prefix in
// Redis, and is ready while Redis answers.
func TestRedisPrefixNamesTheKeys(t *testing.T) {
	t.Parallel()
	url := testutil.RedisURL()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "acpgw-cmdtest-" + hex.EncodeToString(b[:]) + ":"
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--store", url, "--redis-prefix", prefix)
	base := "http://" + addr
	client := acpv2connect.NewSessionServiceClient(http.DefaultClient, base)
	created, err := client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, created.Msg.GetSessionId()) }) {
		t.Errorf("no key under %s names session %s: %q", prefix, created.Msg.GetSessionId(), keys)
	}
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz with Redis up: %s", res.Status)
	}
	if _, err := client.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: created.Msg.GetSessionId()})); err != nil {
		t.Error(err)
	}
	stopServe(t, cancel, exited)
}

// With --shutdown-drain, a serve told to stop is not ready but goes on
// answering calls for the drain, then exits cleanly.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--shutdown-drain", "3s")
	base := "http://" + addr
	status := func(path string) int {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before the stop: %d", got)
	}
	cancel()
	testutil.WaitFor(t, "/readyz to answer 503 while draining", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("serve exited (%d) without draining", code)
		default:
		}
		return status("/readyz") == http.StatusServiceUnavailable
	})
	if got := status("/healthz"); got != http.StatusOK {
		t.Errorf("/healthz while draining: %d", got)
	}
	client := acpv2connect.NewSessionServiceClient(http.DefaultClient, base)
	if _, err := client.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{})); err != nil {
		t.Errorf("a call while draining: %v", err)
	}
	waitExit(t, exited, 15*time.Second) // the drain and the shutdown
}

// A second SIGTERM during --shutdown-drain ends the drain: an operator
// (or a supervisor's escalation) is not made to wait an hour. Not
// parallel: it signals the test process, which every serve draining at the
// time would take as its second signal too; parallel tests wait until the
// sequential ones are done.
func TestSecondSignalEndsTheDrain(t *testing.T) {
	// Caught here too, so that the test process never dies of it.
	sink := make(chan os.Signal, 1)
	signal.Notify(sink, syscall.SIGTERM)
	defer signal.Stop(sink)
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--shutdown-drain", "1h")
	cancel() // the first signal
	testutil.WaitFor(t, "/readyz to answer 503 while draining", func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, exited, 15*time.Second)
}

// --max-event-bytes reaches the store: with a cap of one byte, a session
// keeps only its newest event, and a Watch from the start begins with the
// snapshot that stands for the rest.
func TestMaxEventBytesTrimsTheLog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--max-event-bytes", "1")
	defer stopServe(t, cancel, exited)
	calls, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	client := acpv2connect.NewSessionServiceClient(http.DefaultClient, "http://"+addr)
	created, err := client.CreateSession(calls, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetSessionId()
	// The demo agent asks a permission: the first option answers it.
	answer := func(ev *acpv2.SessionEvent) {
		if req := ev.GetPermissionRequest(); req != nil && len(req.GetOptions()) > 0 {
			_, err := client.RespondPermission(calls, connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: req.GetRequestId(), OptionId: req.GetOptions()[0].GetOptionId()}))
			if err != nil {
				t.Error(err)
			}
		}
	}
	turn, err := testutil.Turn(calls, client, &acpv2.PromptRequest{SessionId: id, Prompt: []*acpv2.ContentBlock{
		{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "hello"}}}}}, answer)
	if err != nil {
		t.Fatal(err)
	}
	if len(turn) < 3 {
		t.Fatalf("the demo turn gave %d events", len(turn))
	}
	watched, err := testutil.Watch(calls, client, id, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if snap := watched[0].GetSnapshot(); snap == nil || watched[0].GetSeq() < turn[len(turn)-2].GetSeq() {
		t.Fatalf("a Watch from the start began with %v, want a snapshot standing for all but the newest event", watched[0])
	}
}

// version and --version print the build's one line, as buildinfo has it.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{arg}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, stderr.String())
		}
		if want := buildinfo.Get().String() + "\n"; stdout.String() != want || !strings.HasPrefix(want, "acp-gateway ") {
			t.Errorf("%s printed %q, want %q", arg, stdout.String(), want)
		}
	}
}

// TestTryFailsWhenItsTurnFails: a turn whose agent dies does not look like
// success.
func TestTryFailsWhenItsTurnFails(t *testing.T) {
	t.Parallel()
	status := 3
	cmd, err := agentsim.Command(agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Exit: &status}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--agent", "dies="+shellquote.Join(cmd...))
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"try", "--url", "http://" + addr, "--agent", "dies"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "the turn failed") {
		t.Errorf("try exited %d: %s", code, errOut.String())
	}
	stopServe(t, cancel, exited)
}
