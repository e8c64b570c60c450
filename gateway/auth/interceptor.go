package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// NewInterceptor returns a connect.Interceptor that authenticates every unary
// and streaming handler call with a, and calls the handler with the user in
// its context (see [User]).
//
// A failure is answered with connect.CodeUnauthenticated, the error's message
// (a wraps [ErrUnauthenticated]) or a generic one (anything else, whose text is
// not known to be safe), and a `WWW-Authenticate: Bearer` header. The
// interceptor does nothing on the client side.
func NewInterceptor(a Authenticator, opts ...InterceptorOption) connect.Interceptor {
	i := &interceptor{auth: a}
	for _, o := range opts {
		o(i)
	}
	return i
}

// InterceptorOption configures NewInterceptor.
type InterceptorOption func(*interceptor)

// WithThrottle limits each client address's failed attempts with t: a call
// from an address that made too many is answered
// connect.CodeResourceExhausted, its credentials unchecked.
func WithThrottle(t *Throttle) InterceptorOption {
	return func(i *interceptor) { i.throttle = t }
}

type interceptor struct {
	auth     Authenticator
	throttle *Throttle
}

// authenticate returns ctx carrying the user h authenticates, or the
// connect.Error to answer with. On failure it sets the WWW-Authenticate
// challenge in response, the response headers, or when that is nil in the
// error's metadata. (Response headers work for every protocol; gRPC sends an
// error's metadata as trailers, where net/http drops WWW-Authenticate.)
// procedure is the call's (see [Procedure]), peer the client's address, for
// the throttle.
func (i *interceptor) authenticate(ctx context.Context, h, response http.Header, procedure, peer string) (context.Context, *connect.Error) {
	if User(ctx) != "" {
		return ctx, nil // Middleware authenticated the request
	}
	var tk *ticket
	if i.throttle != nil {
		var wait time.Duration
		if tk, wait = i.throttle.begin(peer); wait > 0 {
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"too many failed authentication attempts from this address; retry in %v", (wait+time.Second-1).Truncate(time.Second)))
		}
	}
	user, err := i.auth.Authenticate(WithProcedure(ctx, procedure), h)
	ok := err == nil && user != ""
	if tk != nil {
		// A call without credentials guessed nothing, nor did one whose
		// failure could not be a guess (an expired token, an issuer out
		// of reach: see NotAGuess).
		i.throttle.end(tk, !ok && countsAsGuess(err))
	}
	if ok {
		return WithUser(ctx, user), nil
	}
	msg := "unauthenticated"
	if err != nil && errors.Is(err, ErrUnauthenticated) {
		msg = err.Error()
	}
	cerr := connect.NewError(connect.CodeUnauthenticated, errors.New(msg))
	if response == nil {
		response = cerr.Meta()
	}
	response.Set("WWW-Authenticate", "Bearer")
	return nil, cerr
}

// Middleware authenticates each request with a before next sees it, and so
// before any of its body is read. connect-go reads a unary request's
// message, inflating a compressed one, before interceptors run: behind
// NewInterceptor alone, anyone could make the server read and inflate
// request bodies. A request a does not authenticate is answered as
// NewInterceptor answers, in the request's protocol (Connect, gRPC or
// gRPC-Web): unauthenticated, with `WWW-Authenticate: Bearer` in the
// response headers (or resource_exhausted, from an address the throttle
// of opts holds back, after a pause: see refusalHold); refused, when not nil, is told of it first. next
// runs with the user in the request's context, where NewInterceptor finds
// it and authenticates no more. Give both the same options, so that both
// count failures in one throttle.
func Middleware(a Authenticator, next http.Handler, refused func(*http.Request, error), opts ...InterceptorOption) http.Handler {
	i := NewInterceptor(a, opts...).(*interceptor)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The URL path is the procedure, and RemoteAddr the peer, as
		// connect-go gives them to interceptors.
		ctx, cerr := i.authenticate(r.Context(), r.Header, w.Header(), r.URL.Path, r.RemoteAddr)
		if cerr != nil {
			if refused != nil {
				refused(r, cerr)
			}
			if i.throttle != nil && cerr.Code() == connect.CodeResourceExhausted {
				i.throttle.holdBack(r.Context())
			}
			_ = errorWriter.Write(w, r, cerr)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// errorWriter writes Middleware's errors as connect-go's handlers write
// them.
var errorWriter = connect.NewErrorWriter()

// WrapUnary implements connect.Interceptor.
func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		var response http.Header
		if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
			response = info.ResponseHeader()
		}
		ctx, cerr := i.authenticate(ctx, req.Header(), response, req.Spec().Procedure, req.Peer().Addr)
		if cerr != nil {
			return nil, cerr
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor; it is a pass-through.
func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, cerr := i.authenticate(ctx, conn.RequestHeader(), conn.ResponseHeader(), conn.Spec().Procedure, conn.Peer().Addr)
		if cerr != nil {
			return cerr
		}
		return next(ctx, conn)
	}
}
