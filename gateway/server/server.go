// Package server serves the acp.v2 SessionService over Connect, gRPC and
// gRPC-Web on one HTTP listener (HTTP/1.1 and unencrypted HTTP/2), with gRPC
// health and reflection, CORS, and health endpoints beside it.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/rs/cors"

	"github.com/acp-gateway/acp-gateway/gateway/acpnet"
	"github.com/acp-gateway/acp-gateway/gateway/flush"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// Defaults for Options fields left zero.
const (
	// DefaultListen is the address served when none is configured.
	DefaultListen = "127.0.0.1:8080"
	// DefaultReadMaxBytes bounds a request message.
	DefaultReadMaxBytes = 4 << 20
	// DefaultSendMaxBytes bounds a response message.
	DefaultSendMaxBytes = 16 << 20
	// DefaultBodyTimeout bounds how long a request's body may take to
	// arrive.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a connection may carry no request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnections bounds the connections open at once.
	DefaultMaxConnections = 4096
)

// smallReadMaxBytes bounds a request message of gRPC health and
// reflection.
const smallReadMaxBytes = 4 << 10

// reflectionProcedure is the method of both versions of gRPC reflection.
const reflectionProcedure = "ServerReflectionInfo"

// compressMinBytes is the smallest response message that is compressed
// when the client accepts gzip.
const compressMinBytes = 4 << 10

// readHeaderTimeout bounds how long a client may take to send headers. There
// is deliberately no ReadTimeout or WriteTimeout: they would cut long-lived
// server streams (Options.BodyTimeout bounds the reading of bodies alone).
const readHeaderTimeout = 10 * time.Second

// Options configure a Server.
type Options struct {
	// CORSOrigins lists the origins browsers may call from. Empty means no
	// cross-origin access.
	CORSOrigins []string
	// ReadMaxBytes and SendMaxBytes bound one message each way.
	ReadMaxBytes, SendMaxBytes int
	// Ready reports readiness for /readyz and gRPC health; nil means
	// always ready.
	Ready func() bool
	// Extra handlers mounted on the mux (such as /metrics), by pattern.
	Extra map[string]http.Handler
	// Interceptors wrap every SessionService call, outermost first (as
	// service.Interceptors orders them: tracing, the access log,
	// authentication, rate limits).
	Interceptors []connect.Interceptor
	// Gate, when set, wraps the SessionService's handler in front of
	// everything that reads a request's body: auth.Middleware, which
	// answers an unauthenticated request before any of its body is read
	// or inflated.
	Gate func(http.Handler) http.Handler
	// AllowedHosts lists the host names and addresses, without a port,
	// that a request may name in its Host header besides the loopback
	// ones (localhost, 127.0.0.0/8, ::1), with any port; AnyHost accepts
	// every Host. A web page whose name an attacker makes resolve to the
	// gateway's address (DNS rebinding) sends that name, and is refused.
	// A request's Origin header, when it has one, must be the gateway's
	// own (the host and port of its Host) or one of CORSOrigins. Refused
	// requests are answered 403. GET /healthz, /readyz and /metrics and
	// gRPC health, which probers call by any name, are not checked.
	AllowedHosts []string
	// Log receives lines for the requests refused for their Host or
	// Origin, and for the connections refused past MaxConnections: at
	// most one of each every 10 seconds, with the count of refusals it
	// stands for, and what the client sent clipped. Nil logs nothing.
	Log *slog.Logger
	// BodyTimeout bounds how long a request's body may take to arrive
	// once its headers have; a slower body is cut (deadline_exceeded). It
	// bounds the reading of the body only: a Prompt or Watch stream lasts
	// as long as it will once its request is read. Zero is
	// DefaultBodyTimeout; less than zero, no bound.
	BodyTimeout time.Duration
	// IdleTimeout closes a connection that has carried no request (an
	// HTTP/1.1 keep-alive) or no stream (HTTP/2) for this long; one with a
	// stream open, such as a Watch between heartbeats, is not idle. Zero
	// is DefaultIdleTimeout; less than zero, never.
	IdleTimeout time.Duration
	// MaxConnections bounds the connections open at once: further ones
	// are closed as soon as they are accepted. Zero is
	// DefaultMaxConnections; less than zero, no bound.
	MaxConnections int
	// ACP, when set, serves ACP itself at /acp (package acpnet), over the
	// SessionService as its handler serves it to network clients (behind
	// Gate and Interceptors), under the Host and Origin checks and
	// MaxConnections. Its Service is set here; a zero ReadMaxBytes is
	// ReadMaxBytes.
	ACP *acpnet.Options
	// TLS, when set, makes the server serve HTTPS with it: HTTP/1.1 and
	// HTTP/2 over TLS, negotiated by ALPN, on the one port. Without it the
	// server serves plain HTTP/1.1 and h2c.
	TLS *tls.Config
}

// Server is one gateway HTTP server.
type Server struct {
	http *http.Server
	// base is cancelled on shutdown so that streaming handlers end;
	// http.Server.Shutdown alone does not cancel their contexts.
	cancel context.CancelCauseFunc
	// limit bounds the open connections of every listener served; nil:
	// no bound.
	limit *connLimit
	// acp serves /acp; nil when off.
	acp *acpnet.Handler
}

// ErrShuttingDown is the cause with which Shutdown cancels the streams'
// contexts, so that they can tell the client so (context.Cause), rather
// than end as if they were done.
var ErrShuttingDown = errors.New("the gateway is shutting down")

// New returns a Server for svc.
func New(svc acpv2connect.SessionServiceHandler, opts Options) *Server {
	if opts.ReadMaxBytes <= 0 {
		opts.ReadMaxBytes = DefaultReadMaxBytes
	}
	if opts.SendMaxBytes <= 0 {
		opts.SendMaxBytes = DefaultSendMaxBytes
	}
	ready := func() bool { return opts.Ready == nil || opts.Ready() }
	mux := http.NewServeMux()
	path, svcHandler := acpv2connect.NewSessionServiceHandler(svc,
		connect.WithReadMaxBytes(opts.ReadMaxBytes),
		connect.WithSendMaxBytes(opts.SendMaxBytes),
		// Compressing every small streamed event cost about half the
		// gateway's CPU (docs/BENCHMARKS.md); only large messages gain.
		connect.WithCompressMinBytes(compressMinBytes),
		withBoundedGzip(opts.ReadMaxBytes),
		// Each event is marshalled once for all the streams sending it.
		connect.WithCodec(newProtoCodec()),
		connect.WithCodec(newJSONCodec()),
		connect.WithInterceptors(append([]connect.Interceptor{framing{}}, opts.Interceptors...)...),
	)
	// The server streams send their events in batches with one flush each
	// (connect flushes after every message).
	service := flush.Holdable(unaryFraming(svcHandler, int64(opts.ReadMaxBytes)), serverStream)
	if opts.Gate != nil {
		service = opts.Gate(service)
	}
	mux.Handle(path, service)
	var acp *acpnet.Handler
	if opts.ACP != nil {
		acpOpts := *opts.ACP
		acpOpts.Service = service
		acpOpts.ReadMaxBytes = cmp.Or(acpOpts.ReadMaxBytes, opts.ReadMaxBytes)
		acp = acpnet.New(acpOpts)
		var h http.Handler = acp
		if opts.Gate != nil {
			h = opts.Gate(h)
		}
		// Browsers cannot set Authorization on a WebSocket.
		h = acpnet.TokenFromProtocols(h)
		mux.Handle(acpnet.Path, h)
		mux.Handle(acpnet.Path+"/", h)
	}
	// gRPC health and reflection answer anyone (health even by any Host):
	// their requests, a service name or a symbol, are tiny, and are read
	// and inflated no further than that. (connect-go's default is no
	// limit, and its gzip inflates a whole bomb.)
	small := []connect.HandlerOption{connect.WithReadMaxBytes(smallReadMaxBytes), withBoundedGzip(smallReadMaxBytes)}
	mux.Handle(grpchealth.NewHandler(readyChecker{grpchealth.NewStaticChecker(acpv2connect.SessionServiceName), ready}, small...))
	reflector := grpcreflect.NewStaticReflector(acpv2connect.SessionServiceName)
	reflectV1, reflectV1Handler := grpcreflect.NewHandlerV1(reflector, small...)
	reflectV1Alpha, reflectV1AlphaHandler := grpcreflect.NewHandlerV1Alpha(reflector, small...)
	mux.Handle(reflectV1, reflectV1Handler)
	mux.Handle(reflectV1Alpha, reflectV1AlphaHandler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	for pattern, h := range opts.Extra {
		mux.Handle(pattern, h)
	}
	var handler http.Handler = mux
	if len(opts.CORSOrigins) > 0 {
		handler = cors.New(cors.Options{
			AllowedOrigins: opts.CORSOrigins,
			// DELETE and the Acp-* headers are /acp's (Streamable HTTP).
			AllowedMethods: append(connectcors.AllowedMethods(), http.MethodDelete),
			AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization", "X-Request-Id", "Traceparent", "Tracestate",
				acpnet.HeaderConnectionID, acpnet.HeaderSessionID, "Last-Event-ID"),
			ExposedHeaders: append(connectcors.ExposedHeaders(), "WWW-Authenticate", "X-Request-Id", acpnet.HeaderConnectionID),
			// Bearer tokens travel in Authorization, not cookies: browsers
			// are never told to send credentials.
			AllowCredentials: false,
			MaxAge:           7200,
		}).Handler(mux)
	}
	handler = newHostPolicy(opts.AllowedHosts, opts.CORSOrigins, opts.Log).handler(handler)
	if timeout := cmp.Or(opts.BodyTimeout, DefaultBodyTimeout); timeout > 0 {
		// Reflection is a bidirectional stream: its body ends when the
		// client is done asking, however long it keeps the stream open
		// (grpcurl, or an interactive client, for a session). Its
		// messages are bounded (small); and a client cut at the deadline
		// could open another at once: the deadline bounds nothing there.
		handler = bodyDeadline(handler, timeout,
			reflectV1+reflectionProcedure, reflectV1Alpha+reflectionProcedure)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if opts.TLS != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	base, cancel := context.WithCancelCause(context.Background())
	s := &Server{cancel: cancel, acp: acp}
	if n := cmp.Or(opts.MaxConnections, DefaultMaxConnections); n > 0 {
		s.limit = &connLimit{max: int64(n), log: opts.Log}
	}
	s.http = &http.Server{
		Handler:           handler,
		Protocols:         protocols,
		ReadHeaderTimeout: readHeaderTimeout,
		// For HTTP/2 too: the server takes its idle timeout from here.
		IdleTimeout: max(cmp.Or(opts.IdleTimeout, DefaultIdleTimeout), 0),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	if opts.TLS != nil {
		s.http.TLSConfig = opts.TLS.Clone()
	}
	return s
}

// Serve serves on l until Shutdown. It returns nil after a clean shutdown.
func (s *Server) Serve(l net.Listener) error {
	var err error
	if s.http.TLSConfig != nil {
		// The certificates are in TLSConfig; ALPN offers h2 and http/1.1.
		err = s.http.ServeTLS(bufferedListener{Listener: l, limit: s.limit}, "", "")
	} else {
		err = s.http.Serve(bufferedListener{Listener: l, limit: s.limit})
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, cancels streams and waits for
// handlers to return or ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel(ErrShuttingDown)
	err := s.http.Shutdown(ctx)
	if s.acp != nil {
		// http.Server does not wait for hijacked connections (the
		// WebSockets of /acp), whose contexts have ended, nor knows of
		// the Streamable HTTP connections between their requests.
		done := make(chan struct{})
		go func() {
			s.acp.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = cmp.Or(err, ctx.Err())
		}
	}
	return err
}

// serverStream tells the requests of the server-streaming procedures.
func serverStream(r *http.Request) bool {
	switch r.URL.Path {
	case acpv2connect.SessionServicePromptProcedure, acpv2connect.SessionServiceWatchProcedure:
		return true
	}
	return false
}

// framing answers a streaming request whose message framing is broken (a
// truncated envelope) with invalid_argument: connect-go reports it as
// internal, which would blame the gateway for the client's bytes. Unary
// gRPC requests are read before interceptors run: unaryFraming checks
// theirs.
type framing struct{}

func (framing) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (framing) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (framing) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, framedConn{conn})
	}
}

type framedConn struct{ connect.StreamingHandlerConn }

func (c framedConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeInternal {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("malformed request: %s", ce.Message()))
	}
	return err
}

// readyChecker answers gRPC health checks as /readyz does: not serving
// while the gateway is not ready (its store out of reach, or draining).
type readyChecker struct {
	*grpchealth.StaticChecker
	ready func() bool
}

func (c readyChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	resp, err := c.StaticChecker.Check(ctx, req)
	if err == nil && !c.ready() {
		resp.Status = grpchealth.StatusNotServing
	}
	return resp, err
}
