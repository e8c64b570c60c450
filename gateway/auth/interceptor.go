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
	if i.throttle != nil {
		if wait := i.throttle.begin(peer); wait > 0 {
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"too many failed authentication attempts from this address; retry in %v", (wait+time.Second-1).Truncate(time.Second)))
		}
	}
	user, err := i.auth.Authenticate(WithProcedure(ctx, procedure), h)
	ok := err == nil && user != ""
	if i.throttle != nil {
		// A call without credentials guessed nothing.
		i.throttle.end(peer, !ok && !errors.Is(err, errNoToken))
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
