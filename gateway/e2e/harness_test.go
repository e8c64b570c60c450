// Package e2e tests the gateway end to end: real HTTP on 127.0.0.1, real
// agent processes (this test binary re-executed as a scripted ACP agent),
// and Connect, gRPC and gRPC-Web clients.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	egress.ListenIfCommanded()
	testutil.SlowPackage("the end-to-end tests run gateways with agents, Redis, bubblewrap and faults")
	// The fault tests stop Redis: its client's complaints are expected.
	redisstore.SetLog(slog.New(slog.DiscardHandler))
	code := m.Run()
	if code == 0 {
		if left := childProcesses(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "child processes outlived their sessions: %v\n", left)
			code = 1
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// childProcesses lists the living processes whose parent is this one.
func childProcesses() []int { return procfs.Children(os.Getpid()) }

// newChild returns the child process of this test process that was not
// among before; the test fails when there is none.
func newChild(t *testing.T, before []int) int {
	t.Helper()
	for _, p := range childProcesses() {
		if !slices.Contains(before, p) {
			return p
		}
	}
	t.Fatal("no new child process found")
	return 0
}

// agentCommand returns the command line of a scripted agent: this test
// binary, run again.
func agentCommand(t testing.TB, s agentsim.Script) []string {
	t.Helper()
	cmd, err := agentsim.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

type gateway struct {
	base    string
	mgr     *session.Manager
	srv     *server.Server
	metrics *metrics.Metrics
	// clients by protocol and transport.
	clients map[string]acpv2connect.SessionServiceClient
	connect acpv2connect.SessionServiceClient
	// stop shuts the gateway down (once; the test's cleanup calls it too).
	stop func()
	// clock runs the sessions' idle and permission timers when the
	// gateway was started with gatewayOpts.fakeClock, else nil;
	// idleTimeout is the idle timeout.
	clock       *clockwork.FakeClock
	idleTimeout time.Duration
}

type gatewayOpts struct {
	agents            map[string][]string
	heartbeat         time.Duration
	permissionTimeout time.Duration
	watchBuffer       int
	startTimeout      time.Duration
	idleTimeout       time.Duration
	maxAgentLine      int
	// store is the gateway's store; nil means a new memory store.
	store statestore.Store
	// maxEnded caps the closed sessions kept by the memory store made
	// when store is nil.
	maxEnded int
	// log receives the gateway's JSON logs; nil discards them.
	log io.Writer
	// sessionSeries caps the sessions with per-session metrics (0: the
	// default cap, negative: none).
	sessionSeries int
	// auth, when set, authenticates every call.
	auth auth.Authenticator
	// workspaces, confineCwd and anyCwd are the workspace policy (with
	// auth, confineCwd or anyCwd is needed).
	workspaces         *workspace.Root
	confineCwd, anyCwd bool
	// Limits (zero: none, or the default for maxPromptBytes).
	maxSessions, maxUserSessions, maxPromptBytes int
	rateLimit                                    float64
	rateBurst, maxUserStreams                    int
	// authFailureLimit is as app.Config's (zero: the default).
	authFailureLimit           int
	readMaxBytes, sendMaxBytes int
	// tracing, when set, is the tracing interceptor.
	tracing connect.Interceptor
	// env is the agents' environment; nil means just PATH, unless nilEnv
	// asks for nil itself (what an allowlist naming no set variable gives).
	env    []string
	nilEnv bool
	// configure, when set, changes the gateway's configuration last (the
	// sandbox tests confine its agents).
	configure func(*app.Config)
	// listener, when set, is the one the gateway serves on (testutil.Listen).
	listener net.Listener
	// fakeClock runs the sessions' idle and permission timers on a fake
	// clock, gateway.clock, that only the test moves (idleOut, Advance):
	// a timeout then passes exactly when the test says, however slow the
	// machine, and takes no time.
	fakeClock bool
}

// startGateway runs a gateway on a loopback port for the test's lifetime.
func startGateway(t *testing.T, o gatewayOpts) *gateway {
	t.Helper()
	if o.heartbeat == 0 {
		o.heartbeat = time.Minute
	}
	if o.idleTimeout == 0 {
		o.idleTimeout = -1
	}
	if o.log == nil {
		o.log = io.Discard
	}
	if o.env == nil && !o.nilEnv {
		o.env = []string{"PATH=" + os.Getenv("PATH")}
	}
	if o.store == nil {
		o.store = statestore.NewMemory(statestore.Options{MaxEndedSessions: o.maxEnded})
	}
	cfg := app.Config{
		Session: session.Options{
			Agents:             o.agents,
			Env:                o.env,
			Store:              o.store,
			Log:                slog.New(service.LogHandler(slog.NewJSONHandler(o.log, nil))),
			PermissionTimeout:  o.permissionTimeout,
			WatchBuffer:        o.watchBuffer,
			AgentStartTimeout:  o.startTimeout,
			AgentStopGrace:     500 * time.Millisecond,
			IdleTimeout:        o.idleTimeout,
			MaxAgentLine:       o.maxAgentLine,
			MaxSessions:        o.maxSessions,
			MaxSessionsPerUser: o.maxUserSessions,
			Workspaces:         o.workspaces,
			ConfineCwd:         o.confineCwd,
		},
		Metrics:           metrics.Options{MaxSessionSeries: o.sessionSeries},
		Auth:              o.auth,
		AnyCwd:            o.anyCwd,
		Tracing:           o.tracing,
		AuthFailureLimit:  o.authFailureLimit,
		RateLimit:         o.rateLimit,
		RateBurst:         o.rateBurst,
		MaxStreamsPerUser: o.maxUserStreams,
		Heartbeat:         o.heartbeat,
		MaxPromptBytes:    o.maxPromptBytes,
		ReadMaxBytes:      o.readMaxBytes,
		SendMaxBytes:      o.sendMaxBytes,
	}
	var clock *clockwork.FakeClock
	if o.fakeClock {
		clock = clockwork.NewFakeClock()
		cfg.Session.Clock = clock
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	gw, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h1 := &http.Client{Transport: &http.Transport{}}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	t.Cleanup(func() { // after the gateway's shutdown
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
	})
	if o.listener == nil {
		o.listener = testutil.Listen(t)
	}
	base, stop := testutil.ServeOn(t, o.listener, gw.Server.Serve, gw.Shutdown)
	g := &gateway{base: base, mgr: gw.Manager, srv: gw.Server, metrics: gw.Metrics, stop: stop, clock: clock, idleTimeout: o.idleTimeout, clients: map[string]acpv2connect.SessionServiceClient{
		"connect+proto over HTTP/1.1": acpv2connect.NewSessionServiceClient(h1, base),
		"connect+json over h2c":       acpv2connect.NewSessionServiceClient(h2, base, connect.WithProtoJSON()),
		"grpc over h2c":               acpv2connect.NewSessionServiceClient(h2, base, connect.WithGRPC()),
		"grpc-web over HTTP/1.1":      acpv2connect.NewSessionServiceClient(h1, base, connect.WithGRPCWeb()),
	}}
	g.connect = acpv2connect.NewSessionServiceClient(h1, base, connect.WithProtoJSON())
	return g
}

// idleOut moves g's fake clock past the idle timeout until session id's
// agent has been ended as idle (the session is agent_lost). The idle timer
// is armed once the session's last stream has gone, which may be just
// after a turn's end reached the client: each look moves the clock again
// (a timer armed while the agent is in use does nothing when it fires).
func (g *gateway) idleOut(t *testing.T, id string) {
	t.Helper()
	testutil.WaitFor(t, "the idle agent to be ended", func() bool {
		g.clock.Advance(g.idleTimeout)
		return snapshot(t, g, id).GetState() == "agent_lost"
	})
}

func (g *gateway) create(t *testing.T, agent string) string {
	t.Helper()
	res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent, Cwd: t.TempDir()}))
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return res.Msg.GetSessionId()
}

func textPrompt(s string) []*acpv2.ContentBlock {
	return []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}}
}

// turn runs a prompt to its end and returns its events. onEvent, if set,
// sees each event first (to answer permission requests).
func turn(t *testing.T, c acpv2connect.SessionServiceClient, id string, onEvent func(*acpv2.SessionEvent)) []*acpv2.SessionEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, err := testutil.Turn(ctx, c, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}, onEvent)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// watchAll collects events after afterSeq until n events arrived.
func watchAll(t *testing.T, c acpv2connect.SessionServiceClient, id string, afterSeq uint64, n int) []*acpv2.SessionEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, err := testutil.Watch(ctx, c, id, afterSeq, n)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func codeOf(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func update(s string) agentsim.Step { return agentsim.Step{Update: raw(s)} }

// promptErr runs a prompt to its end and returns its error, for prompts
// that are expected to fail. An empty text sends no content block at all.
func promptErr(g *gateway, id, text string) error {
	req := &acpv2.PromptRequest{SessionId: id}
	if text != "" {
		req.Prompt = textPrompt(text)
	}
	stream, err := g.connect.Prompt(context.Background(), connect.NewRequest(req))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

// openWatch opens a Watch through c from the start of session id; cancel
// ends it.
func openWatch(t *testing.T, c acpv2connect.SessionServiceClient, id string) (stream *connect.ServerStreamForClient[acpv2.WatchResponse], cancel func()) {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return stream, func() {
		stop()
		stream.Close()
	}
}
