package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots to docs/screenshots")

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	os.Exit(m.Run())
}

// browserSetup names what sets up everything TestBrowser needs.
const browserSetup = "./scripts/deps.sh"

const repoRoot = "../.."

// TestBrowser runs web/console/test/browser.mjs in Debian's chromium against
// a real gateway (memory store, the demo agent, token auth) with the console
// mounted at "/" exactly as the binary mounts it.
func TestBrowser(t *testing.T) {
	testutil.Needs(t, "node and chromium")
	node, chromium := browserTools(t)
	token := "console-test-token"
	g := startGateway(t, token)

	shots := screenshotDir(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := browserScript(ctx, t, node, chromium, "browser.mjs", g, token,
		"CONSOLE_DROP_URL="+g.base+"/test/drop",
		"CONSOLE_SCREENSHOTS="+shots,
	)
	var got struct {
		SessionID  string `json:"sessionId"`
		LastSeq    string `json:"lastSeq"`
		Reconnects int    `json:"reconnects"`
	}
	runBrowserScript(t, cmd, shots, &got)

	t.Logf("session %s: the page showed seq 1 to %s, reconnected %d times; Watch afterSeq after the cut: %v",
		got.SessionID, got.LastSeq, got.Reconnects, g.watchesSinceDrop())

	// The page saw every event of the session: its last seq is the session's.
	res, err := g.client.GetSession(context.Background(), authorized(connect.NewRequest(&acpv2.GetSessionRequest{SessionId: got.SessionID}), token))
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(res.Msg.GetSession().GetLastSeq(), 10); got.LastSeq != want {
		t.Errorf("the page's last seq is %s, the session's %s", got.LastSeq, want)
	}
	// After the cut, the page resumed from where it was, not from the start.
	after := g.watchesSinceDrop()
	resumed := false
	for _, seq := range after {
		resumed = resumed || seq > 0
	}
	if !resumed {
		t.Errorf("after the streams were cut, the page's Watch calls had afterSeq %v, want one > 0", after)
	}
}

// runBrowserScript runs cmd, a browser script, and decodes the last line of
// its output into result; it fails the test with the script's output when
// the script fails.
func runBrowserScript(t *testing.T, cmd *exec.Cmd, shots string, result any) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	name := filepath.Base(cmd.Args[len(cmd.Args)-1])
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s\nscreenshots in %s (kept with go test -artifacts)", name, err, stdout.String(), stderr.String(), shots)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), result); err != nil {
		t.Fatalf("%s output %q: %v", name, stdout.String(), err)
	}
}

// screenshotDir returns where a browser script writes its screenshots,
// absolute: docs/screenshots (made if missing) with -update-screenshots,
// else the test's artifact directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := t.ArtifactDir()
	var err error
	if *updateScreenshots {
		dir = filepath.Join(repoRoot, "docs", "screenshots")
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// browserScript returns node running web/console/test/NAME against g, with
// the environment every script reads (the console's URL, token, a cwd for
// sessions, chromium) and extra.
func browserScript(ctx context.Context, t *testing.T, node, chromium, name string, g *gateway, token string, extra ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, node, filepath.Join(repoRoot, "web", "console", "test", name))
	cmd.Env = append(append(os.Environ(),
		"CONSOLE_URL="+g.base+"/",
		"CONSOLE_TOKEN="+token,
		"CONSOLE_CWD="+t.TempDir(),
		"CHROMIUM="+chromium,
	), extra...)
	return cmd
}

// browserTools returns node and chromium, or fails naming the commands
// that install what is missing.
func browserTools(t *testing.T) (node, chromium string) {
	t.Helper()
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node on PATH (Node.js 20 or later)")
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (apt-get install -y chromium)")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "web", "console", "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "web/console/node_modules with playwright-core (npm ci --prefix web/console)")
	}
	if len(missing) > 0 {
		t.Fatalf("the console's browser test needs %s; %s sets all of it up", strings.Join(missing, ", "), browserSetup)
	}
	return node, chromium
}

type gateway struct {
	base   string
	client acpv2connect.SessionServiceClient
	conns  *conns

	mu      sync.Mutex
	watches []uint64 // afterSeq of each Watch call, in order
	dropAt  int      // len(watches) when the connections were cut
}

// startGateway starts a gateway with the demo agent as "demo"; each of
// configure may change its session options (add agents, use a store).
func startGateway(t *testing.T, token string, configure ...func(*session.Options)) *gateway {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+" tester\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authn, err := auth.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	demo, err := agentsim.Command(agentsim.Demo())
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{dropAt: -1}
	opts := session.Options{
		Agents:         map[string][]string{"demo": demo},
		Env:            []string{"PATH=" + os.Getenv("PATH")},
		Store:          statestore.NewMemory(statestore.Options{}),
		AgentStopGrace: 500 * time.Millisecond,
		IdleTimeout:    -1,
	}
	for _, f := range configure {
		f(&opts)
	}
	gw, err := app.New(context.Background(), app.Config{
		Session:      opts,
		Auth:         authn,
		AnyCwd:       true, // the page's cwd is a temporary directory
		Interceptors: []connect.Interceptor{watchRecorder{g}},
		Console:      true, // as the binary mounts it
		ACP:          true, // as the binary serves it
		Extra:        map[string]http.Handler{"POST /test/drop": http.HandlerFunc(g.drop)},
	})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections) // after the gateway's shutdown
	g.conns = &conns{open: map[*conn]bool{}}
	g.base, _ = testutil.Serve(t, func(l net.Listener) error {
		g.conns.Listener = l // before the first Accept, in the same goroutine
		return gw.Server.Serve(g.conns)
	}, gw.Shutdown)
	g.client = acpv2connect.NewSessionServiceClient(hc, g.base)
	return g
}

// drop cuts every connection but the caller's, as a network failure would.
func (g *gateway) drop(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.dropAt = len(g.watches)
	g.mu.Unlock()
	n := g.conns.closeExcept(r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"dropped":%d}`, n)
}

// watchesSinceDrop returns the afterSeq of each Watch call made after drop.
func (g *gateway) watchesSinceDrop() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dropAt < 0 {
		return nil
	}
	return append([]uint64(nil), g.watches[g.dropAt:]...)
}

func authorized[T any](req *connect.Request[T], token string) *connect.Request[T] {
	req.Header().Set("Authorization", "Bearer "+token)
	return req
}

// watchRecorder records the afterSeq of every Watch call.
type watchRecorder struct{ g *gateway }

func (watchRecorder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (watchRecorder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (w watchRecorder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, c connect.StreamingHandlerConn) error {
		if c.Spec().Procedure == acpv2connect.SessionServiceWatchProcedure {
			c = recordingConn{c, w.g}
		}
		return next(ctx, c)
	}
}

type recordingConn struct {
	connect.StreamingHandlerConn
	g *gateway
}

func (c recordingConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	if req, ok := m.(*acpv2.WatchRequest); ok && err == nil {
		c.g.mu.Lock()
		c.g.watches = append(c.g.watches, req.GetAfterSeq())
		c.g.mu.Unlock()
	}
	return err
}

// conns is a listener that can close the connections it accepted.
type conns struct {
	net.Listener
	mu   sync.Mutex
	open map[*conn]bool
}

type conn struct {
	net.Conn
	l    *conns
	once sync.Once
}

func (l *conns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, l: l}
	l.mu.Lock()
	l.open[tc] = true
	l.mu.Unlock()
	return tc, nil
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// closeExcept closes every open connection but the one from remote.
func (l *conns) closeExcept(remote string) int {
	l.mu.Lock()
	var victims []*conn
	for c := range l.open {
		if c.RemoteAddr().String() != remote {
			victims = append(victims, c)
		}
	}
	l.mu.Unlock()
	for _, c := range victims {
		_ = c.Close()
	}
	return len(victims)
}

// startGatewayWith starts a gateway as startGateway does, with agents, by
// name, beside the demo agent.
func startGatewayWith(t *testing.T, token string, agents map[string]agentsim.Script) *gateway {
	t.Helper()
	return startGateway(t, token, func(o *session.Options) {
		for name, script := range agents {
			cmd, err := agentsim.Command(script)
			if err != nil {
				t.Fatal(err)
			}
			o.Agents[name] = cmd
		}
	})
}
