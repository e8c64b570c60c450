package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/textcut"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
)

// RequestIDHeader carries a request's id: taken from the client when it
// sends a sane one, else made up, and always sent back.
const RequestIDHeader = "X-Request-Id"

var saneRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// call is what the access log learns of a call as it passes the
// interceptors.
type call struct {
	requestID string
	user      string
	// client is the address of the TCP peer (behind a proxy, the proxy's).
	client string
}

type callKey struct{}

// RequestID returns the id of the request ctx belongs to, or "".
func RequestID(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c.requestID
	}
	return ""
}

// InterceptorConfig configures [Interceptors].
type InterceptorConfig struct {
	// Log receives one line per call.
	Log *slog.Logger
	// Tracing, when set, starts spans (otelconnect); it runs first, so log
	// lines can name the trace.
	Tracing connect.Interceptor
	// Auth authenticates calls; nil lets every call in as the empty user.
	Auth connect.Interceptor
	// User names the caller once Auth has run.
	User func(context.Context) string
	// RateLimit is the requests a second allowed per user, in bursts of
	// RateBurst; zero means no limit. It applies only with Auth.
	RateLimit float64
	RateBurst int
	// MaxStreamsPerUser bounds each user's Prompt and Watch streams open at
	// once; zero means no limit. It applies only with Auth.
	MaxStreamsPerUser int
	// SessionAgent names the agent of a session, for the log.
	SessionAgent func(id string) string
}

// Interceptors returns the interceptors of every SessionService call, outermost
// first: tracing, request ids and the access log, authentication, then
// per-caller rate limits and stream limits.
func Interceptors(cfg InterceptorConfig) []connect.Interceptor {
	var out []connect.Interceptor
	if cfg.Tracing != nil {
		out = append(out, cfg.Tracing)
	}
	if cfg.User == nil {
		cfg.User = func(context.Context) string { return "" }
	}
	var log *slog.Logger
	if cfg.Log != nil {
		log = slog.New(LogHandler(cfg.Log.Handler()))
	}
	out = append(out, &accessLog{log: log, agent: cfg.SessionAgent})
	if cfg.Auth != nil {
		out = append(out, cfg.Auth)
	}
	out = append(out, noteUser(cfg.User))
	// Without authentication there is no user to count: the client's
	// address would make every client behind one proxy share a bucket.
	if cfg.RateLimit > 0 && cfg.Auth != nil {
		out = append(out, newRateLimiter(cfg.RateLimit, max(1, cfg.RateBurst), cfg.User))
	}
	if cfg.MaxStreamsPerUser > 0 && cfg.Auth != nil {
		out = append(out, newStreamLimiter(cfg.MaxStreamsPerUser, cfg.User))
	}
	return out
}

// accessLog gives each call a request id and logs it when it ends: the
// procedure, user, client address, session and agent, code and duration. It never logs
// headers (tokens) or message contents (prompts).
type accessLog struct {
	log   *slog.Logger
	agent func(string) string
}

func (a *accessLog) start(ctx context.Context, h interface{ Get(string) string }, peer connect.Peer) (context.Context, *call) {
	c := &call{requestID: h.Get(RequestIDHeader), client: peer.Addr}
	if !saneRequestID.MatchString(c.requestID) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.requestID = hex.EncodeToString(b[:])
	}
	return context.WithValue(ctx, callKey{}, c), c
}

// agentOf names the agent of the session msg is about, if any.
func (a *accessLog) agentOf(msg any) string {
	if m, ok := msg.(interface{ GetSessionId() string }); ok && m.GetSessionId() != "" && a.agent != nil {
		return a.agent(m.GetSessionId())
	}
	return ""
}

// end logs the call; agent is that of the session msg names (looked up
// before a unary call runs: a closed session is gone after it).
func (a *accessLog) end(ctx context.Context, c *call, procedure string, msg any, agent string, began time.Time, err error) {
	if a.log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("procedure", procedure),
		slog.String("user", c.user),
		slog.String("client", c.client),
		slog.String("code", codeName(err)),
		slog.Duration("duration", time.Since(began)),
	}
	if m, ok := msg.(interface{ GetSessionId() string }); ok && m.GetSessionId() != "" {
		attrs = append(attrs, slog.String("session", m.GetSessionId()), slog.String("agent", agent))
	}
	level := slog.LevelInfo
	if err != nil && (connect.CodeOf(err) == connect.CodeInternal || connect.CodeOf(err) == connect.CodeUnknown) {
		level = slog.LevelError
		var ie *internalError
		if errors.As(err, &ie) {
			// What the client was not told, for the operator.
			attrs = append(attrs, slog.String("error", ie.cause.Error()))
		}
	}
	// LogHandler adds request_id and trace_id from ctx.
	a.log.LogAttrs(ctx, level, "rpc", attrs...)
}

// LogRefused returns what logs a call answered before it reached the
// interceptors (a refusal of auth.Middleware), as the access log logs
// calls: its procedure, no user, its code, and the client's address. A
// nil log gives nil.
//
// Anyone can be refused, as often as they like: the procedure (the URL's
// path, up to a megabyte) is clipped to maxLoggedPath bytes, and past
// refusedLogBurst lines in refusedLogEvery the lines are held back and
// counted, until the next line let through tells how many ("unlogged").
func LogRefused(log *slog.Logger) func(*http.Request, error) {
	if log == nil {
		return nil
	}
	log = slog.New(LogHandler(log.Handler()))
	var limit refusedLog
	return func(r *http.Request, err error) {
		ok, held := limit.allow(time.Now())
		if !ok {
			return
		}
		attrs := []slog.Attr{slog.String("procedure", clipPath(r.URL.Path)),
			slog.String("user", ""), slog.String("code", codeName(err)), slog.String("client", r.RemoteAddr)}
		if held > 0 {
			attrs = append(attrs, slog.Int("unlogged", held))
		}
		log.LogAttrs(r.Context(), slog.LevelInfo, "rpc", attrs...)
	}
}

// maxLoggedPath bounds the path of a refused call in the log: those of
// the procedures are far shorter.
const maxLoggedPath = 256

// clipPath is path cut to maxLoggedPath bytes, at a character's start,
// with "…" to tell it was cut.
func clipPath(path string) string {
	if len(path) <= maxLoggedPath {
		return path
	}
	return textcut.Prefix(path, maxLoggedPath) + "…"
}

// The log of refused calls takes up to refusedLogBurst lines every
// refusedLogEvery: each failed attempt of a client is logged, and a flood
// of them is counted. (The auth throttle logs the clients it holds back.)
const (
	refusedLogBurst = 1000
	refusedLogEvery = 10 * time.Second
)

// refusedLog counts the lines of refused calls in periods of
// refusedLogEvery. Its zero value is ready.
type refusedLog struct {
	mu     sync.Mutex
	period time.Time // when the current period began
	lines  int       // the lines let through in it
	held   int       // lines held back since the last let through
}

// allow reports whether a line may be logged at now and, when it may, how
// many were held back before it.
func (l *refusedLog) allow(now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.period) >= refusedLogEvery {
		l.period, l.lines = now, 0
	}
	if l.lines >= refusedLogBurst {
		l.held++
		return false, 0
	}
	l.lines++
	held, l.held = l.held, 0
	return true, held
}

func codeName(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func (a *accessLog) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		began := time.Now()
		ctx, c := a.start(ctx, req.Header(), req.Peer())
		agent := a.agentOf(req.Any())
		res, err := next(ctx, req)
		if res != nil {
			res.Header().Set(RequestIDHeader, c.requestID)
		} else if ce := (*connect.Error)(nil); errors.As(err, &ce) {
			ce.Meta().Set(RequestIDHeader, c.requestID)
		}
		a.end(ctx, c, req.Spec().Procedure, req.Any(), agent, began, err)
		return res, err
	}
}

func (a *accessLog) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *accessLog) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		began := time.Now()
		ctx, c := a.start(ctx, conn.RequestHeader(), conn.Peer())
		conn.ResponseHeader().Set(RequestIDHeader, c.requestID)
		conn = &firstMessage{StreamingHandlerConn: conn}
		err := next(ctx, conn)
		msg := conn.(*firstMessage).msg
		a.end(ctx, c, conn.Spec().Procedure, msg, a.agentOf(msg), began, err)
		return err
	}
}

// firstMessage remembers the request message of a server stream, for the
// log.
type firstMessage struct {
	connect.StreamingHandlerConn
	msg any
}

func (f *firstMessage) Receive(m any) error {
	err := f.StreamingHandlerConn.Receive(m)
	if err == nil && f.msg == nil {
		f.msg = m
	}
	return err
}

// noteUser tells the access log who the caller is, once authenticated.
func noteUser(user func(context.Context) string) beforeCall {
	return func(ctx context.Context) error {
		if c, ok := ctx.Value(callKey{}).(*call); ok {
			c.user = user(ctx)
		}
		return nil
	}
}

// beforeCall is an interceptor that runs itself before each call the
// server handles; an error is the call's answer.
type beforeCall func(context.Context) error

func (f beforeCall) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			if err := f(ctx); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (beforeCall) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f beforeCall) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := f(ctx); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// LogHandler wraps h so that each record logged with the context of a call
// names the call's request_id (and trace_id when traced).
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(contextHandler); ok {
		return h
	}
	return contextHandler{h}
}

type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}
