// Command acp-gateway puts ACP agents on the network.
//
//	acp-gateway serve [--listen HOST:PORT] [--agent NAME=COMMAND_LINE]... [--store URL]
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kballard/go-shellquote"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/gateway/telemetry"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
	"github.com/acp-gateway/acp-gateway/statestore/storeurl"
)

const usage = `usage:
  acp-gateway serve [--listen HOST:PORT] [--agent NAME=COMMAND_LINE]... [--store URL] [flags]
  acp-gateway try [--url URL] [--agent NAME] [--cwd DIR] [--token TOKEN | --token-file FILE] [--json]   (run one turn and show it; --json: every event as proto JSON)
  acp-gateway connect URL --agent NAME [--token TOKEN | --token-file FILE] [--cwd DIR]   (an editor's ACP agent, run on the gateway at URL)
  acp-gateway demo-agent    (the built-in demo agent, speaking ACP on stdin/stdout)
  acp-gateway version   (this build's version, revision and Go release)

Run 'acp-gateway serve --help' for every serve flag.
`

func main() {
	// In an agent's sandbox, this binary opens the egress proxy's socket
	// and then runs the agent.
	egress.ListenIfCommanded()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// exitUsage is the exit status for bad flags or configuration.
const exitUsage = 2

// benchMoved is what `acp-gateway bench` says: the bench is a command of
// its own, which this binary does not carry.
const benchMoved = "acp-gateway bench: the bench is its own command now, with the same flags: acp-gateway-bench (go run ./cmd/acp-gateway-bench)"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		cfg, err := parseServe(args[1:], stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintf(stderr, "acp-gateway: %v\n", err)
			return exitUsage
		}
		if err := serve(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "acp-gateway: %v\n", err)
			if errors.As(err, new(configError)) {
				return exitUsage
			}
			return 1
		}
		return 0
	case "try":
		return try(ctx, args[1:], stdout, stderr)
	case "connect":
		return connectCmd(ctx, args[1:], stdin, stdout, stderr)
	case "bench":
		// The bench left this binary; the command it was says where it went.
		fmt.Fprintln(stderr, benchMoved)
		return exitUsage
	case "demo-agent":
		if err := agentsim.Serve(ctx, os.Stdin, stdout, agentsim.Demo(), stderr); err != nil {
			fmt.Fprintf(stderr, "acp-gateway demo-agent: %v\n", err)
			return 1
		}
		return 0
	case "version", "--version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "acp-gateway version: takes no arguments, got %q\n", args[1:])
			return exitUsage
		}
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "acp-gateway: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// configError is a problem of the configuration found while starting up,
// such as an unreadable token file: it exits with exitUsage.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// sessionOptions are the session manager's options of cfg, over store,
// for the replica reached at advertise.
func (cfg *serveConfig) sessionOptions(store statestore.Store, log *slog.Logger, advertise string, c *confinement) session.Options {
	return session.Options{
		Sandbox:            c.sandbox,
		Homes:              c.homes,
		Limits:             c.limits,
		AgentNice:          noneIfZero(cfg.confine.nice),
		Egress:             c.egress,
		EgressHelper:       c.helper,
		Agents:             cfg.agents,
		AgentMCP:           cfg.agentMCP,
		MCPAllow:           cfg.mcpAllow,
		Env:                agentEnv(cfg.envAllow),
		Store:              store,
		Log:                log,
		PermissionTimeout:  cfg.permissionTimeout,
		TurnTimeout:        cfg.turnTimeout,
		CancelGrace:        cfg.cancelGrace,
		StoreOutageTimeout: cfg.storeOutage,
		IdleTimeout:        cfg.idleTimeout,
		MaxStoreBytes:      cfg.maxStoreBytes,
		// The flags' zero is no bound, the options' a default.
		MaxToolCalls:          noneIfZero(cfg.maxToolCalls),
		MaxPendingPermissions: noneIfZero(cfg.maxPendingPerms),
		AgentStderrLines:      noneIfZero(cfg.stderrLines),
		AgentStderrBytes:      noneIfZero(cfg.stderrBytes),
		Replica:               advertise,
		LeaseTTL:              cfg.leaseTTL,
		MaxSessions:           cfg.maxSessions,
		MaxSessionsPerUser:    cfg.maxUserSessions,
		MaxAgentLine:          cfg.maxAgentLine,
		WatchBuffer:           cfg.watchBuffer,
		WatchBufferBytes:      cfg.watchBufferBytes,
		Workspaces:            cfg.workspaces,
		ConfineCwd:            cfg.confineCwd,
		AdoptAgentSessions:    cfg.adoptSessions,
	}
}

// adoptUnconfinedWarning is logged when users may adopt agent sessions
// and their working directories are not confined (--any-cwd).
const adoptUnconfinedWarning = "--adopt-agent-sessions with working directories not confined: an agent's list holds every user's sessions in any directory, and any user may adopt one, with its history"

// noneIfZero is a flag's bound as session.Options takes it: the flag's
// zero (no bound) is less than zero there, where zero is the default.
func noneIfZero(v int) int {
	if v == 0 {
		return -1
	}
	return v
}

// serveConfig is the configuration of `acp-gateway serve`.
type serveConfig struct {
	listen            string
	tlsCert, tlsKey   string // --tls-cert, --tls-key
	tls               *tls.Config
	allowedHosts      listFlag // --allowed-host
	insecureNoAuth    bool     // --insecure-no-auth
	bodyTimeout       time.Duration
	connIdleTimeout   time.Duration
	maxConnections    int
	agents            map[string][]string
	agentMCP          mcpFlags // --agent-mcp
	mcpAllow          listFlag // --mcp-allow
	adoptSessions     bool     // --adopt-agent-sessions
	store             string
	storeFile         string // --store-file, read into store
	storeShown        string // store with any password hidden
	corsOrigins       listFlag
	heartbeat         time.Duration
	streamWrite       time.Duration
	permissionTimeout time.Duration
	turnTimeout       time.Duration
	cancelGrace       time.Duration
	storeOutage       time.Duration
	idleTimeout       time.Duration
	envAllow          listFlag
	maxEvents         int
	maxEventBytes     int64
	redisPrefix       string
	watchBuffer       int
	watchBufferBytes  int
	maxEnded          int
	maxStoreBytes     int64
	maxToolCalls      int
	maxPendingPerms   int
	stderrLines       int
	stderrBytes       int
	advertise         string
	leaseTTL          time.Duration
	shutdownDrain     time.Duration
	metricsListen     string
	sessionSeries     int

	// workspaces and confineCwd are the workspace policy serve set up
	// (setupWorkspaces), for sessionOptions.
	workspaces *workspace.Root
	confineCwd bool

	authTokens       string
	oidc             auth.OIDCConfig
	workspaceRoot    string // --workspace-root
	anyCwd           bool   // --any-cwd
	maxSessions      int
	maxUserSessions  int
	maxPromptBytes   int
	maxRequestBytes  int
	maxResponseBytes int
	maxAgentLine     int
	rateLimit        float64
	authFailureLimit int
	rateBurst        int
	maxUserStreams   int
	otlpEndpoint     string
	console          bool
	acp              bool
	logLevel         slog.Level

	confine confineConfig

	// replicaSecretFile and insecureForwarding are how replicas sharing a
	// store trust each other (package replica).
	replicaSecretFile  string
	insecureForwarding bool
	// forwardTimeout bounds the wait for the replica a request is
	// forwarded to.
	forwardTimeout time.Duration
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// defaultEnvAllow lists the variables of the gateway's environment that
// agents inherit. Nothing else passes, so the gateway's own secrets never
// reach an agent.
var defaultEnvAllow = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM", "SHELL"}

// agentFlags collects repeated --agent NAME=COMMAND_LINE flags.
type agentFlags map[string][]string

func (a agentFlags) String() string { return "" }

func (a agentFlags) Set(v string) error {
	name, cmdline, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=COMMAND_LINE, got %q", v)
	}
	if _, dup := a[name]; dup {
		return fmt.Errorf("agent %q given twice", name)
	}
	words, err := shellquote.Split(cmdline)
	if err != nil {
		return fmt.Errorf("agent %q: command line: %v", name, err)
	}
	if len(words) == 0 {
		return fmt.Errorf("agent %q: empty command line", name)
	}
	a[name] = words
	return nil
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	cfg := &serveConfig{agents: agentFlags{}, agentMCP: mcpFlags{}}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.listen, "listen", server.DefaultListen, "address to serve Connect, gRPC and gRPC-Web on")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "serve HTTPS (HTTP/1.1 and HTTP/2 over TLS) on --listen with this PEM certificate chain, with --tls-key (default: plain HTTP/1.1 and h2c)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.Var(&cfg.allowedHosts, "allowed-host", "a host name or address, without a port, that requests may name in their Host header, at any port, besides loopback ones, the --listen host and the --advertise host (repeatable; * accepts any Host, unsafe: DNS rebinding)")
	fs.BoolVar(&cfg.insecureNoAuth, "insecure-no-auth", false, "unsafe: serve without authentication on a --listen address other machines may reach, where anyone who reaches it runs agents as this gateway's user")
	fs.DurationVar(&cfg.bodyTimeout, "request-body-timeout", server.DefaultBodyTimeout, "cut a request whose body takes longer than this to arrive (deadline_exceeded); streams last as long as they will once their request is read (0: no bound)")
	fs.DurationVar(&cfg.connIdleTimeout, "conn-idle-timeout", server.DefaultIdleTimeout, "close a connection that carries no request or stream for this long (0: never)")
	fs.IntVar(&cfg.maxConnections, "max-connections", server.DefaultMaxConnections, "connections open at once; further ones are closed as soon as accepted (0: no limit)")
	fs.Var(agentFlags(cfg.agents), "agent", "NAME=COMMAND_LINE of an agent (repeatable)")
	fs.Var(cfg.agentMCP, "agent-mcp", `NAME=SERVER: an MCP server every session of agent NAME is given, as ACP's McpServer JSON: {"name":"fs","command":"/abs/path","args":[],"env":[{"name":"K","value":"V"}]} (stdio) or {"type":"http","name":"docs","url":"https://…","headers":[…]} (http, sse); not subject to --mcp-allow (repeatable)`)
	fs.BoolVar(&cfg.adoptSessions, "adopt-agent-sessions", false, "let users list the sessions an agent keeps itself (ACP session/list) in their workspace, and adopt one as a new session (ListAgentSessions, CreateSession's adopt_agent_session_id); off by default")
	fs.Var(&cfg.mcpAllow, "mcp-allow", "an MCP server clients may give a session in CreateSession: a stdio server's command as an absolute path (exactly), or an http or https URL prefix (scheme, host and optional path) for http and sse servers; none by default (repeatable)")
	fs.StringVar(&cfg.store, "store", "bolt:"+defaultBoltPath(), "state store: memory:, bolt:PATH or redis://HOST:PORT/DB")
	fs.StringVar(&cfg.storeFile, "store-file", "", "read the --store URL from this file, so that a Redis password is neither on the command line nor in the environment (a --store given on the command line wins over a store-file in --config, and the other way round)")
	fs.StringVar(&cfg.replicaSecretFile, "replica-secret-file", "", "file holding the secret that every replica sharing a redis:// store holds (32 bytes or more: openssl rand -hex 32): a replica forwards requests only to peers that prove it, "+
		"with the caller's user asserted under it rather than the caller's token; needed with a redis:// store and authentication, unless --insecure-forwarding")
	fs.BoolVar(&cfg.insecureForwarding, "insecure-forwarding", false, "unsafe: with a redis:// store and authentication but no --replica-secret-file, forward requests to whatever replica address the store names, with the caller's bearer token, so that anyone who can write to Redis can have them")
	fs.StringVar(&cfg.redisPrefix, "redis-prefix", "", "with a redis:// --store: the prefix of its keys, so that separate deployments can share one Redis (default acpgw:)")
	fs.IntVar(&cfg.watchBuffer, "watch-buffer", session.DefaultWatchBuffer, "events a Prompt or Watch stream may fall behind before it is cut off (it resumes with Watch afterSeq)")
	fs.IntVar(&cfg.watchBufferBytes, "watch-buffer-bytes", session.DefaultWatchBufferBytes, "bytes of encoded events a stream may fall behind, per session, before it is cut off")
	fs.IntVar(&cfg.maxEvents, "max-events", statestore.DefaultMaxEvents, "events kept per session; older ones are dropped and Watch starts with a snapshot (0: keep all)")
	fs.Int64Var(&cfg.maxEventBytes, "max-event-bytes", statestore.DefaultMaxEventBytes, "bytes of events kept per session (their encodings); older ones are dropped as with --max-events, the newest always kept (0: no cap)")
	fs.IntVar(&cfg.maxEnded, "max-ended-sessions", statestore.DefaultMaxEndedSessions, "closed sessions kept in the store; closing one past it deletes the first closed (0: keep all)")
	fs.Int64Var(&cfg.maxStoreBytes, "max-store-bytes", session.DefaultMaxStoreBytes, "bytes of events and tool calls the store keeps in all; past it the closed sessions are deleted, the first closed first, but for the last (0: no bound)")
	fs.IntVar(&cfg.maxToolCalls, "max-tool-calls", session.DefaultMaxToolCalls, "distinct tool calls per session; an agent's update that would add one more is kept as an unknown update, not merged (0: no limit)")
	fs.IntVar(&cfg.maxPendingPerms, "max-pending-permissions", session.DefaultMaxPendingPermissions, "permission requests and elicitations per session waiting for an answer, counted together; the agent's request past it is answered with an error (0: no limit)")
	fs.IntVar(&cfg.stderrLines, "agent-stderr-lines", agent.DefaultStderrLines, "lines of each agent's stderr logged a second, with bursts of ten seconds' worth; the rest are counted, not logged (0: no limit)")
	fs.IntVar(&cfg.stderrBytes, "agent-stderr-bytes", agent.DefaultStderrBytes, "bytes of each agent's stderr logged a second, as --agent-stderr-lines (0: no limit)")
	fs.StringVar(&cfg.advertise, "advertise", "", "base URL other replicas reach this one at, for a shared store (default http://LISTEN when it names a host)")
	fs.DurationVar(&cfg.leaseTTL, "lease-ttl", session.DefaultLeaseTTL, "with a shared store: how long a dead replica keeps its sessions")
	fs.DurationVar(&cfg.forwardTimeout, "forward-timeout", service.DefaultForwardTimeout, "with a shared store: how long a request forwarded to the replica that runs its session waits for it to connect, "+
		"prove the replica secret and show a sign of life (then as long again for a probe), before it ends unavailable, saying to retry; a slow answer of a live replica is not cut")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", "", "also serve GET /metrics on this address (it is always on --listen)")
	fs.IntVar(&cfg.sessionSeries, "session-metrics-max", metrics.DefaultMaxSessionSeries, "sessions that get per-session metric series at once; more are counted in the aggregates only (0: no per-session series)")
	fs.StringVar(&cfg.authTokens, "auth-tokens", "", "file of TOKEN USER lines (tokens of 16 bytes or more), or sha256:HEX USER (HEX: the token's SHA-256); with it (or --oidc-issuer) every RPC needs Authorization: Bearer (re-read on change and on SIGHUP)")
	fs.StringVar(&cfg.oidc.Issuer, "oidc-issuer", "", "accept OIDC JWT bearer tokens from this issuer")
	fs.StringVar(&cfg.oidc.Audience, "oidc-audience", "", "with --oidc-issuer (required unless --oidc-any-audience): the audience tokens must name, the client id the issuer gave this gateway")
	fs.BoolVar(&cfg.oidc.AnyAudience, "oidc-any-audience", false, "unsafe: with --oidc-issuer, accept the issuer's tokens whatever their audience, those it minted for its other applications too")
	fs.StringVar(&cfg.oidc.JWKSFile, "oidc-jwks-file", "", "with --oidc-issuer: verify tokens with the keys of this local JWKS file")
	fs.StringVar(&cfg.oidc.JWKSURL, "oidc-jwks-url", "", "with --oidc-issuer: verify tokens with the keys at this JWKS URL (default: the issuer's discovery document)")
	fs.StringVar(&cfg.oidc.UserClaim, "oidc-user-claim", auth.DefaultUserClaim, "with --oidc-issuer: the claim naming the user")
	fs.StringVar(&cfg.workspaceRoot, "workspace-root", "", "DIR holding each user's directory, DIR/USER (without authentication, DIR itself): a client's cwd must be in it, and an empty cwd gets a new DIR/USER/SESSION_ID; "+
		"needed with --auth-tokens or --oidc-issuer unless --any-cwd (default: cwd not confined, empty ones under $XDG_STATE_HOME/acp-gateway/workspaces)")
	fs.BoolVar(&cfg.anyCwd, "any-cwd", false, "unsafe: do not confine clients' cwd to their directory of the workspace root, so that every user's agent may run in any directory of the host")
	fs.IntVar(&cfg.maxSessions, "max-sessions", 1000, "sessions this gateway runs at once (0: no limit)")
	fs.IntVar(&cfg.maxUserSessions, "max-sessions-per-user", 20, "open sessions per user, across replicas sharing a store (0: no limit)")
	fs.IntVar(&cfg.maxPromptBytes, "max-prompt-bytes", service.DefaultMaxPromptBytes, "largest prompt, encoded")
	fs.IntVar(&cfg.maxRequestBytes, "max-request-bytes", server.DefaultReadMaxBytes, "largest request message")
	fs.IntVar(&cfg.maxResponseBytes, "max-response-bytes", server.DefaultSendMaxBytes, "largest response message")
	fs.IntVar(&cfg.maxAgentLine, "max-agent-line", agent.DefaultMaxLine, "longest line of agent output; a longer one ends the agent")
	fs.IntVar(&cfg.authFailureLimit, "auth-failure-limit", auth.DefaultFailureLimit, "failed authentication attempts a client address (an IPv6 /64; its /48 may make 16 times as many) may make a minute; past it its calls are refused with resource_exhausted, credentials unchecked, until it refills (behind a proxy every client has the proxy's address; 0: no limit)")
	fs.Float64Var(&cfg.rateLimit, "rate-limit", 20, "requests a second per authenticated user; a stream counts once (0: no limit; no limit without authentication)")
	fs.IntVar(&cfg.rateBurst, "rate-burst", 40, "requests a user may make at once above --rate-limit")
	fs.IntVar(&cfg.maxUserStreams, "max-streams-per-user", service.DefaultMaxStreamsPerUser, "Prompt and Watch streams an authenticated user may have open at once on this gateway (0: no limit; no limit without authentication)")
	fs.StringVar(&cfg.otlpEndpoint, "otlp-endpoint", "", "export trace spans by OTLP/HTTP to this URL (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT; none: no export)")
	fs.BoolVar(&cfg.acp, "acp", true, "speak ACP itself at /acp (WebSocket; /acp/AGENT for one agent), behind the same authentication, Host/Origin checks and limits as the Connect API")
	fs.BoolVar(&cfg.console, "console", true, "serve the web console at / (its page and agent names need no token; the RPCs it makes do)")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.Var(&cfg.corsOrigins, "cors-origin", "an origin browsers may call from, such as https://app.example.com (repeatable; none by default)")
	fs.DurationVar(&cfg.heartbeat, "heartbeat", service.DefaultHeartbeat, "interval of heartbeats on idle server streams")
	fs.DurationVar(&cfg.streamWrite, "stream-write-timeout", service.DefaultStreamWriteTimeout, "end a Prompt or Watch stream whose client takes longer than this to accept a batch of messages (it resumes with Watch afterSeq; 0: never)")
	fs.DurationVar(&cfg.turnTimeout, "turn-timeout", 0, "end a turn that runs longer than this: the agent gets session/cancel, and is stopped if it does not end the turn within --cancel-grace (0: no limit)")
	fs.DurationVar(&cfg.cancelGrace, "cancel-grace", session.DefaultCancelGrace, "how long an agent has to end its turn after a Cancel (or --turn-timeout) before the gateway stops it; the turn then ends cancelled")
	fs.DurationVar(&cfg.storeOutage, "store-outage-timeout", session.DefaultStoreOutageTimeout, "how long a session's events wait for a store that fails to take them (its agent's output is not read meanwhile, once 16 MiB wait) before the gateway gives up: the agent is stopped and the session's streams end unavailable, saying from which seq to resume")
	fs.DurationVar(&cfg.permissionTimeout, "permission-timeout", session.DefaultPermissionTimeout, "answer a permission request or an elicitation left unanswered this long with cancelled")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", session.DefaultIdleTimeout, "end an agent with no turn and no watcher for this long (negative: never)")
	fs.DurationVar(&cfg.shutdownDrain, "shutdown-drain", 0, "on SIGTERM or SIGINT, go on serving this long while not ready (/readyz 503, gRPC health NOT_SERVING), so that load balancers stop sending new clients, then shut down; a second signal shuts down at once (0: no drain)")
	fs.Var(&cfg.envAllow, "agent-env", "a variable of the gateway's environment that agents inherit (repeatable; default "+strings.Join(defaultEnvAllow, ",")+")")
	cfg.confine.addConfineFlags(fs)
	configPath := fs.String("config", "", "YAML file of settings named like these flags; flags given here win")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return nil, err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	if *configPath != "" {
		if err := applyConfig(fs, *configPath); err != nil {
			return nil, err
		}
	}
	if err := cfg.readStoreFile(fs, onCommandLine); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	cfg.confine.configPath = *configPath
	if err := cfg.confine.checkConfine(cfg.authConfigured()); err != nil {
		return nil, err
	}
	if err := cfg.checkBoundary(); err != nil {
		return nil, err
	}
	for _, o := range cfg.corsOrigins {
		if o == "*" {
			return nil, errors.New("--cors-origin: a wildcard origin is not allowed; list each origin")
		}
	}
	for name, d := range map[string]time.Duration{
		"--stream-write-timeout": cfg.streamWrite, "--request-body-timeout": cfg.bodyTimeout, "--conn-idle-timeout": cfg.connIdleTimeout,
	} {
		if d < 0 {
			return nil, fmt.Errorf("%s must not be negative, got %v", name, d)
		}
	}
	if cfg.heartbeat <= 0 {
		return nil, fmt.Errorf("--heartbeat must be positive, got %v", cfg.heartbeat)
	}
	if cfg.turnTimeout < 0 || cfg.cancelGrace <= 0 {
		return nil, errors.New("--turn-timeout must not be negative, and --cancel-grace must be positive")
	}
	if cfg.storeOutage <= 0 {
		return nil, fmt.Errorf("--store-outage-timeout must be positive, got %v", cfg.storeOutage)
	}
	if cfg.permissionTimeout <= 0 {
		return nil, fmt.Errorf("--permission-timeout must be positive, got %v", cfg.permissionTimeout)
	}
	if len(cfg.envAllow) == 0 {
		cfg.envAllow = defaultEnvAllow
	}
	if len(cfg.agents) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the demo agent: %v", err)
		}
		cfg.agents["demo"] = []string{self, "demo-agent"}
	}
	for name := range cfg.agentMCP {
		if _, ok := cfg.agents[name]; !ok {
			return nil, fmt.Errorf("--agent-mcp: no agent is named %q", name)
		}
	}
	if err := session.CheckMCPAllow(cfg.mcpAllow); err != nil {
		return nil, fmt.Errorf("--mcp-allow: %v", err)
	}
	shown, err := storeurl.Check(cfg.store)
	if err != nil {
		if cfg.storeFile != "" {
			return nil, fmt.Errorf("--store-file %s: %v", cfg.storeFile, err)
		}
		return nil, fmt.Errorf("--store: %v", err)
	}
	cfg.storeShown = shown
	if cfg.maxEventBytes < 0 {
		return nil, fmt.Errorf("--max-event-bytes must not be negative, got %d", cfg.maxEventBytes)
	}
	if cfg.maxEvents < 0 || cfg.maxEnded < 0 {
		return nil, errors.New("--max-events and --max-ended-sessions must not be negative")
	}
	if cfg.maxStoreBytes < 0 {
		return nil, fmt.Errorf("--max-store-bytes must not be negative, got %d", cfg.maxStoreBytes)
	}
	if err := cfg.checkReplicas(); err != nil {
		return nil, err
	}
	if cfg.redisPrefix != "" {
		if !cfg.sharedStore() {
			return nil, errors.New("--redis-prefix needs a redis:// or rediss:// --store")
		}
		// A session's keys hash-tag its id in braces (Redis Cluster).
		if strings.ContainsAny(cfg.redisPrefix, "{}") {
			return nil, fmt.Errorf("--redis-prefix %q: braces would break the keys' hash tags", cfg.redisPrefix)
		}
	}
	if cfg.watchBuffer < 1 || cfg.watchBufferBytes < 1 {
		return nil, errors.New("--watch-buffer and --watch-buffer-bytes must be positive")
	}
	if cfg.metricsListen != "" {
		if _, _, err := net.SplitHostPort(cfg.metricsListen); err != nil {
			return nil, fmt.Errorf("--metrics-listen %q: %v", cfg.metricsListen, err)
		}
	}
	if cfg.sessionSeries < 0 {
		return nil, fmt.Errorf("--session-metrics-max must not be negative, got %d", cfg.sessionSeries)
	}
	for name, v := range map[string]int{
		"--max-sessions": cfg.maxSessions, "--max-sessions-per-user": cfg.maxUserSessions,
		"--max-prompt-bytes": cfg.maxPromptBytes, "--rate-burst": cfg.rateBurst, "--max-connections": cfg.maxConnections,
		"--max-streams-per-user": cfg.maxUserStreams, "--auth-failure-limit": cfg.authFailureLimit,
		"--max-tool-calls": cfg.maxToolCalls, "--max-pending-permissions": cfg.maxPendingPerms,
		"--agent-stderr-lines": cfg.stderrLines, "--agent-stderr-bytes": cfg.stderrBytes,
	} {
		if v < 0 {
			return nil, fmt.Errorf("%s must not be negative, got %d", name, v)
		}
	}
	for name, v := range map[string]int{
		"--max-request-bytes": cfg.maxRequestBytes, "--max-response-bytes": cfg.maxResponseBytes, "--max-agent-line": cfg.maxAgentLine,
	} {
		if v < 1024 {
			return nil, fmt.Errorf("%s must be at least 1024, got %d", name, v)
		}
	}
	if cfg.rateLimit < 0 {
		return nil, fmt.Errorf("--rate-limit must not be negative, got %v", cfg.rateLimit)
	}
	if cfg.oidc.Issuer == "" && (cfg.oidc.Audience != "" || cfg.oidc.AnyAudience || cfg.oidc.JWKSFile != "" || cfg.oidc.JWKSURL != "") {
		return nil, errors.New("--oidc-audience, --oidc-any-audience, --oidc-jwks-file and --oidc-jwks-url need --oidc-issuer")
	}
	switch {
	case cfg.oidc.Issuer != "" && cfg.oidc.Audience == "" && !cfg.oidc.AnyAudience:
		return nil, errors.New("--oidc-issuer needs --oidc-audience AUDIENCE, the client id the issuer puts in the aud claim of tokens for this gateway " +
			"(without it a token the issuer minted for any other application would do), or the unsafe --oidc-any-audience")
	case cfg.oidc.Audience != "" && cfg.oidc.AnyAudience:
		return nil, errors.New("give --oidc-audience or --oidc-any-audience, not both")
	}
	if err := cfg.checkWorkspace(); err != nil {
		return nil, err
	}
	if cfg.shutdownDrain < 0 {
		return nil, fmt.Errorf("--shutdown-drain must not be negative, got %v", cfg.shutdownDrain)
	}
	if cfg.forwardTimeout <= 0 {
		return nil, fmt.Errorf("--forward-timeout must be positive, got %v", cfg.forwardTimeout)
	}
	if cfg.leaseTTL < 300*time.Millisecond {
		return nil, fmt.Errorf("--lease-ttl must be at least 300ms, got %v", cfg.leaseTTL)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if cfg.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %v", err)
		}
		cfg.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.advertise == "" {
		if host, _, _ := net.SplitHostPort(cfg.listen); host != "" && host != "0.0.0.0" && host != "::" {
			cfg.advertise = cfg.scheme() + "://" + cfg.listen
		}
	}
	return cfg, nil
}

// scheme is the gateway's URL scheme: https with --tls-cert.
func (cfg *serveConfig) scheme() string {
	if cfg.tlsCert != "" {
		return "https"
	}
	return "http"
}

func serve(ctx context.Context, cfg *serveConfig, stdout io.Writer) error {
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	defer l.Close()
	log := slog.New(service.LogHandler(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.logLevel})))
	redisstore.SetLog(log)
	if os.Getpid() == 1 {
		// A container's init, as the image runs it: what agents leave
		// behind becomes the gateway's to reap, through the shutdown too.
		go agent.ReapOrphans(context.Background(), log)
	}
	cfg.warnBoundary(log, l.Addr().String())
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("the gateway's working directory: %w", err)
	}
	if err := resolveAgents(cfg.agents, wd, log); err != nil {
		return configError{err}
	}
	authn, err := authenticator(ctx, cfg, log)
	if err != nil {
		return configError{err}
	}
	confined, err := setupConfinement(ctx, cfg, authn != nil, gatewayFiles(cfg), log)
	if err != nil {
		return configError{err}
	}
	// After the agents end (the manager is closed by a later defer).
	defer confined.limits.Close()
	tracing, err := telemetry.New(ctx, telemetry.Endpoint(cfg.otlpEndpoint))
	if err != nil {
		return configError{err}
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(ctx); err != nil {
			log.Warn("flushing trace spans", "error", err)
		}
	}()
	series := cfg.sessionSeries
	if series == 0 {
		series = -1 // off
	}
	secret, err := cfg.replicaSecret(log)
	if err != nil {
		return configError{err}
	}
	store, err := storeurl.Open(ctx, cfg.store, storeurl.Options{Store: statestore.Options{
		MaxEvents: cfg.maxEvents, MaxEventBytes: cfg.maxEventBytes, MaxEndedSessions: cfg.maxEnded,
	}, RedisPrefix: cfg.redisPrefix})
	if err != nil {
		return err
	}
	defer store.Close()
	advertise := cfg.advertise
	if advertise == "" || strings.HasSuffix(advertise, ":0") {
		advertise = cfg.scheme() + "://" + l.Addr().String() // the port the kernel chose
	}
	allowedHosts := cfg.hostsAllowed(advertise)
	if cfg.workspaces, cfg.confineCwd, err = cfg.setupWorkspaces(log); err != nil {
		return err
	}
	if cfg.adoptSessions && authn != nil && !cfg.confineCwd {
		log.Warn(adoptUnconfinedWarning)
	}
	gw, err := app.New(ctx, app.Config{
		Session: cfg.sessionOptions(store, log, advertise, confined),
		Metrics: metrics.Options{MaxSessionSeries: series, Sandbox: cfg.confine.sandbox, AgentLimits: confined.limits.Limits().Resources()},
		Auth:    authn,
		AnyCwd:  cfg.anyCwd,
		Tracing: tracing.Interceptor,
		// Zero here is the default; the flag's zero is no limit.
		AuthFailureLimit:   cmp.Or(cfg.authFailureLimit, -1),
		ReplicaSecret:      secret,
		InsecureForwarding: cfg.insecureForwarding,
		ForwardTimeout:     cfg.forwardTimeout,
		RateLimit:          cfg.rateLimit,
		RateBurst:          cfg.rateBurst,
		MaxStreamsPerUser:  cmp.Or(cfg.maxUserStreams, -1),
		Heartbeat:          cfg.heartbeat,
		// Zero here is the default; the flag's zero is no bound.
		StreamWriteTimeout: cmp.Or(cfg.streamWrite, -1),
		MaxPromptBytes:     cfg.maxPromptBytes,
		CORSOrigins:        cfg.corsOrigins,
		ReadMaxBytes:       cfg.maxRequestBytes,
		SendMaxBytes:       cfg.maxResponseBytes,
		AllowedHosts:       allowedHosts,
		BodyTimeout:        cmp.Or(cfg.bodyTimeout, -1),
		ConnIdleTimeout:    cmp.Or(cfg.connIdleTimeout, -1),
		MaxConnections:     cmp.Or(cfg.maxConnections, -1),
		Console:            cfg.console,
		ACP:                cfg.acp,
		TLS:                cfg.tls,
	})
	if err != nil {
		return err
	}
	// Only for the early returns below: after serving, gw.Shutdown closes
	// the manager, and closing it again does nothing.
	defer gw.Manager.Close()
	mgr, met, srv := gw.Manager, gw.Metrics, gw.Server
	var metricsSrv *http.Server
	var metricsL net.Listener
	if cfg.metricsListen != "" {
		if metricsL, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", met.Handler())
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	build := buildinfo.Get()
	log.Info("serving", "addr", l.Addr().String(), "agents", mgr.AgentNames(), "store", cfg.storeShown, "replica", advertise, "replica_secret", secret != nil,
		"tls", cfg.tls != nil, "auth", authn != nil, "allowed_hosts", allowedHosts, "workspace_root", cfg.workspaceDir(), "cwd_confined", cfg.confineCwd, "adopt_agent_sessions", cfg.adoptSessions, "trace_export", tracing.Exporting, "version", build.Version, "revision", build.Revision)
	done := make(chan error, 2)
	go func() { done <- srv.Serve(l) }()
	if metricsSrv != nil {
		log.Info("serving metrics", "addr", metricsL.Addr().String())
		go func() {
			if err := metricsSrv.Serve(metricsL); !errors.Is(err, http.ErrServerClosed) {
				done <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}
	var serveErr error
	select {
	case serveErr = <-done:
	case <-ctx.Done():
		if cfg.shutdownDrain > 0 {
			// Not ready, still serving: load balancers take the replica
			// out before its listener closes.
			// A second SIGTERM or SIGINT ends the drain: the ctx of the
			// first no longer tells of one. Listening starts before the
			// replica reports not ready.
			again, stopAgain := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			gw.Drain()
			log.Info("draining before shutdown (a second signal shuts down now)", "for", cfg.shutdownDrain.String())
			select {
			case serveErr = <-done:
			case <-time.After(cfg.shutdownDrain):
			case <-again.Done():
				log.Info("second signal: the drain ends")
			}
			stopAgain()
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(shutdownCtx)
	}
	shutdownErr := gw.Shutdown(shutdownCtx)
	switch {
	case serveErr != nil:
		return serveErr
	case shutdownErr != nil:
		return shutdownErr
	}
	return <-done
}

// authenticator returns what authenticates calls: the token file, OIDC
// JWTs, or both; nil when neither is configured. The token file is
// re-read on change and SIGHUP until ctx ends.
func authenticator(ctx context.Context, cfg *serveConfig, log *slog.Logger) (auth.Authenticator, error) {
	var as []auth.Authenticator
	if cfg.authTokens != "" {
		tokens, err := auth.LoadTokens(cfg.authTokens)
		if err != nil {
			return nil, fmt.Errorf("--auth-tokens: %w", err)
		}
		go tokens.Watch(ctx, 2*time.Second, log)
		as = append(as, tokens)
	}
	if cfg.oidc.Issuer != "" {
		o, err := auth.NewOIDC(ctx, cfg.oidc)
		if err != nil {
			return nil, fmt.Errorf("--oidc-issuer: %w", err)
		}
		if cfg.oidc.AnyAudience {
			log.Warn("unsafe: --oidc-any-audience accepts the issuer's tokens whatever their audience, those it minted for its other applications too; give --oidc-audience",
				"issuer", cfg.oidc.Issuer)
		}
		as = append(as, o)
	}
	if len(as) > 0 && cfg.authFailureLimit == 0 {
		log.Warn("unsafe: --auth-failure-limit 0 lets every client address guess credentials as fast as it can; give it a limit")
	}
	switch len(as) {
	case 0:
		return nil, nil
	case 1:
		return as[0], nil
	}
	return auth.Chain(as...), nil
}

// agentEnv returns the allowed part of the gateway's environment.
func agentEnv(allow []string) []string {
	var env []string
	for _, name := range allow {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}
