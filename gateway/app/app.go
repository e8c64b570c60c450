// Package app assembles one gateway as `acp-gateway serve` runs it: the
// metrics, the session manager over its store (with the sessions a previous
// run left recovered), the SessionService behind its interceptors, and the
// HTTP server with /metrics and, optionally, the web console. The binary,
// the bench and the tests all build their gateways here, so that what is
// tested and measured is what runs.
package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/acpnet"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/console"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/replica"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Config configures a gateway. Zero fields take the defaults of the
// packages they configure.
type Config struct {
	// Session configures the session manager. Its Log also receives the
	// access log; its Metrics is set by New.
	Session session.Options
	// Metrics configures the Prometheus metrics.
	Metrics metrics.Options
	// Auth authenticates every call; nil lets every call in as the empty
	// user. With Auth, Session.ConfineCwd (with Session.Workspaces) must
	// keep each user's cwd in their own directory, unless AnyCwd is set.
	Auth auth.Authenticator
	// AnyCwd lets the agents of every authenticated user run in any
	// directory of the host: the explicit opt-out of confining their cwd.
	AnyCwd bool
	// Tracing, when set, is the tracing interceptor (telemetry.Tracing).
	Tracing connect.Interceptor
	// ReplicaSecret, the secret the replicas sharing Session.Store hold,
	// makes this replica forward requests only to peers that prove it,
	// with the caller's user asserted under it instead of the caller's
	// credentials, answer peers' challenges, and take forwarded requests'
	// users from their assertions (package replica). Without it a request
	// is forwarded to whatever address the store names, with the caller's
	// credentials: with Auth and a shared store (a statestore.Leaser) that
	// needs InsecureForwarding.
	ReplicaSecret *replica.Secret
	// InsecureForwarding lets a gateway with Auth forward requests without
	// a ReplicaSecret: the explicit opt-out.
	InsecureForwarding bool
	// ForwardTimeout bounds the wait for the replica a request is
	// forwarded to (service.WithForwardTimeout); zero is
	// service.DefaultForwardTimeout.
	ForwardTimeout time.Duration
	// AuthFailureLimit is how many failed authentication attempts each
	// client address may make a minute (auth.Throttle): zero is
	// auth.DefaultFailureLimit, less than zero no limit.
	AuthFailureLimit int
	// RateLimit and RateBurst limit each authenticated user's requests.
	RateLimit float64
	RateBurst int
	// MaxStreamsPerUser bounds each authenticated user's Prompt and Watch
	// streams open at once: zero is service.DefaultMaxStreamsPerUser, less
	// than zero no bound.
	MaxStreamsPerUser int
	// Heartbeat is the interval of heartbeats on idle server streams.
	Heartbeat time.Duration
	// StreamWriteTimeout bounds how long a stream waits for its client to
	// take a batch of messages: zero is service.DefaultStreamWriteTimeout,
	// less than zero no bound.
	StreamWriteTimeout time.Duration
	// MaxPromptBytes bounds a prompt's encoded size.
	MaxPromptBytes int
	// Interceptors run inside the gateway's own, closest to the handlers.
	Interceptors []connect.Interceptor
	// CORSOrigins, ReadMaxBytes and SendMaxBytes are as in server.Options.
	CORSOrigins                []string
	ReadMaxBytes, SendMaxBytes int
	// AllowedHosts are the names and addresses requests may give in Host
	// besides the loopback ones, as in server.Options.
	AllowedHosts []string
	// BodyTimeout, ConnIdleTimeout and MaxConnections are
	// server.Options's BodyTimeout, IdleTimeout and MaxConnections: zero
	// is the default, less than zero no bound.
	BodyTimeout, ConnIdleTimeout time.Duration
	MaxConnections               int
	// Console serves the web console at "/".
	Console bool
	// ACP serves ACP itself at /acp (package acpnet), over the same
	// SessionService, authentication, limits and metrics.
	ACP bool
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2) with it instead of
	// plain HTTP/1.1 and h2c.
	TLS *tls.Config
	// Extra handlers are mounted beside the service, by pattern.
	Extra map[string]http.Handler
}

// App is an assembled gateway, not yet serving: call Server.Serve.
type App struct {
	Manager *session.Manager
	Metrics *metrics.Metrics
	Server  *server.Server
	ready   *readiness
}

// New assembles a gateway and recovers the sessions its store holds.
func New(ctx context.Context, cfg Config) (*App, error) {
	switch {
	case cfg.Session.ConfineCwd && cfg.Session.Workspaces == nil:
		return nil, errors.New("confining cwd needs a workspace root (Session.Workspaces)")
	case cfg.Auth != nil && !cfg.Session.ConfineCwd && !cfg.AnyCwd:
		return nil, errors.New("with authentication, confine each user's cwd to their workspace " +
			"(Session.Workspaces and Session.ConfineCwd), or set AnyCwd to let every user's agent run in any directory")
	}
	if _, shared := cfg.Session.Store.(statestore.Leaser); shared && cfg.Auth != nil && cfg.ReplicaSecret == nil && !cfg.InsecureForwarding {
		return nil, errors.New("with authentication and a shared store, give the replicas a ReplicaSecret, so that a lease forged in the store " +
			"cannot send users' requests and credentials elsewhere, or set InsecureForwarding")
	}
	met := metrics.New(cfg.Metrics)
	cfg.Session.Metrics = met
	if cfg.Session.MaxToolCallBytes == 0 && cfg.SendMaxBytes > 0 {
		cfg.Session.MaxToolCallBytes = max(cfg.SendMaxBytes-session.SnapshotHeadroom, cfg.SendMaxBytes/2)
	}
	mgr := session.NewManager(cfg.Session)
	if err := mgr.Recover(ctx); err != nil {
		mgr.Close()
		return nil, fmt.Errorf("recovering sessions from the store: %w", err)
	}
	// A zero Heartbeat is service.DefaultHeartbeat.
	svcOpts := []service.Option{service.WithMetrics(met), service.WithUser(auth.User), service.WithHeartbeat(cfg.Heartbeat),
		service.WithForwardTimeout(cfg.ForwardTimeout)}
	if cfg.StreamWriteTimeout != 0 {
		svcOpts = append(svcOpts, service.WithStreamWriteTimeout(cfg.StreamWriteTimeout))
	}
	if cfg.MaxPromptBytes > 0 {
		svcOpts = append(svcOpts, service.WithMaxPromptBytes(cfg.MaxPromptBytes))
	}
	// Snapshots fit in a response: the session keeps its tool calls
	// within one, as protobuf, and the service trims what JSON outgrows.
	svcOpts = append(svcOpts, service.WithMaxResponseBytes(cfg.SendMaxBytes))
	ic := service.InterceptorConfig{
		Log:               cfg.Session.Log,
		Tracing:           cfg.Tracing,
		User:              auth.User,
		RateLimit:         cfg.RateLimit,
		RateBurst:         cfg.RateBurst,
		MaxStreamsPerUser: max(cmp.Or(cfg.MaxStreamsPerUser, service.DefaultMaxStreamsPerUser), 0),
		SessionAgent:      mgr.AgentOf,
	}
	extra := map[string]http.Handler{"GET /metrics": met.Handler()}
	authn := cfg.Auth
	if secret := cfg.ReplicaSecret; secret != nil {
		svcOpts = append(svcOpts, service.WithReplicaSecret(secret))
		extra["POST "+replica.ProofPath] = secret.Handler(cfg.Session.Replica)
		if authn != nil {
			authn = secret.Authenticator(cfg.Session.Replica, authn)
		}
	}
	var gate func(http.Handler) http.Handler
	if authn != nil {
		var opts []auth.InterceptorOption
		if cfg.AuthFailureLimit >= 0 {
			opts = append(opts, auth.WithThrottle(auth.NewThrottle(cmp.Or(cfg.AuthFailureLimit, auth.DefaultFailureLimit), cfg.Session.Log)))
		}
		// The middleware answers unauthenticated calls before their
		// bodies are read; the interceptor, behind it, finds the user.
		ic.Auth = auth.NewInterceptor(authn, opts...)
		refused := service.LogRefused(cfg.Session.Log)
		gate = func(next http.Handler) http.Handler { return auth.Middleware(authn, next, refused, opts...) }
	}
	if cfg.Console {
		// "/" rather than "GET /", which would conflict with the Connect
		// handlers' patterns.
		extra["/"] = console.Handler(mgr.AgentNames())
	}
	for pattern, h := range cfg.Extra {
		extra[pattern] = h
	}
	var acpOpts *acpnet.Options
	if cfg.ACP {
		acpOpts = &acpnet.Options{
			Agents: mgr.AgentNames(),
			// coder/websocket matches a pattern with a scheme against
			// the Origin's scheme://host.
			OriginPatterns: cfg.CORSOrigins,
			WriteTimeout:   max(cfg.StreamWriteTimeout, 0),
			PingInterval:   cfg.Heartbeat,
			Opened:         met.ACPConnectionOpened,
			Version:        buildinfo.Get().Version,
			Log:            cfg.Session.Log,
		}
	}
	ready := newReadiness(cfg.Session.Store)
	srv := server.New(service.New(mgr, svcOpts...), server.Options{
		Ready:          ready.ready,
		CORSOrigins:    cfg.CORSOrigins,
		Extra:          extra,
		Interceptors:   append(service.Interceptors(ic), cfg.Interceptors...),
		ReadMaxBytes:   cfg.ReadMaxBytes,
		SendMaxBytes:   cfg.SendMaxBytes,
		Gate:           gate,
		AllowedHosts:   cfg.AllowedHosts,
		Log:            cfg.Session.Log,
		BodyTimeout:    cfg.BodyTimeout,
		IdleTimeout:    cfg.ConnIdleTimeout,
		MaxConnections: cfg.MaxConnections,
		ACP:            acpOpts,
		TLS:            cfg.TLS,
	})
	return &App{Manager: mgr, Metrics: met, Server: srv, ready: ready}, nil
}

// Drain makes the gateway not ready (/readyz and gRPC health) while it
// goes on serving, so that load balancers stop sending it new clients
// before it shuts down.
func (a *App) Drain() { a.ready.draining.Store(true) }

// Shutdown stops serving, ending the streams, then ends every agent.
func (a *App) Shutdown(ctx context.Context) error {
	err := a.Server.Shutdown(ctx)
	a.Manager.Close()
	return err
}
