package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/replica"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// ForwardedHeader marks a request one replica forwarded to the replica
// that runs the session. A forwarded request is never forwarded again, so
// two replicas that disagree about ownership cannot loop.
const ForwardedHeader = replica.ForwardedHeader

// forwarder holds a client per replica that requests are forwarded to.
//
// A request that needs a session's agent (Prompt, Cancel,
// RespondPermission, CloseSession, SetMode, SetConfigOption) and lands on a
// replica that does not run it is sent on to the owner's advertised address
// with the same Connect API, rather than through Redis: the owner already
// serves that API (streams included, with their heartbeats and errors), and
// nothing new has to be kept consistent in Redis.
//
// The owner's address comes from the store, which this replica does not
// trust: with a replica secret, the owner must first prove it holds the
// secret, and the request carries the caller's user asserted under it,
// never the caller's credentials (package replica). Without one, the
// request goes to whatever address the store names, with the caller's
// Authorization header.
type forwarder struct {
	http   *http.Client
	secret *replica.Secret

	mu      sync.Mutex
	clients map[string]acpv2connect.SessionServiceClient
}

func newForwarder() *forwarder {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(true)
	return &forwarder{
		http: &http.Client{
			Transport: &http.Transport{Protocols: p},
			// A replica answers itself: a redirect would send the request,
			// and its assertion, elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		clients: map[string]acpv2connect.SessionServiceClient{},
	}
}

// remote is the replica a request is forwarded to.
type remote struct {
	acpv2connect.SessionServiceClient
	holder string
	secret *replica.Secret
}

// remote returns the owning replica at holder, once it proved the replica
// secret, or an error when the request was itself forwarded (unavailable),
// the holder does not answer (unavailable) or is not a replica of this
// deployment (internal).
func (f *forwarder) remote(ctx context.Context, h http.Header, holder string) (*remote, error) {
	if h.Get(ForwardedHeader) != "" {
		return nil, connect.NewError(connect.CodeUnavailable,
			errors.New("the session moved between gateway replicas; retry"))
	}
	if f.secret != nil {
		if err := f.secret.Verify(ctx, f.http, holder); err != nil {
			if errors.Is(err, replica.ErrUnreachable) {
				// The owner is down or restarting while its lease lasts:
				// once it is back, or its lease lapses, a retry goes
				// through.
				return nil, connect.NewError(connect.CodeUnavailable,
					errors.New("the gateway replica that runs the session did not answer; retry"))
			}
			// A wrong or missing proof: the client learns nothing of the
			// address; the access log tells the operator.
			return nil, connect.NewError(connect.CodeInternal, &internalError{fmt.Errorf(
				"not forwarding to the session's replica as the store names it: %w", err)})
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.clients[holder]
	if c == nil {
		c = acpv2connect.NewSessionServiceClient(f.http, holder, connect.WithGRPC())
		f.clients[holder] = c
	}
	return &remote{SessionServiceClient: c, holder: holder, secret: f.secret}, nil
}

// forwarded copies a request of user for the owning replica, with its
// trace context, and the user asserted under the replica secret, or
// without one the caller's credentials.
func forwarded[T any](r *remote, in *connect.Request[T], user string) *connect.Request[T] {
	out := connect.NewRequest(in.Msg)
	keys := []string{"Traceparent", "Tracestate", "X-Request-Id"}
	if r.secret == nil {
		keys = append(keys, "Authorization")
	} else {
		r.secret.Assert(out.Header(), r.holder, in.Spec().Procedure, user)
	}
	for _, k := range keys {
		if v := in.Header().Get(k); v != "" {
			out.Header().Set(k, v)
		}
	}
	out.Header().Set(ForwardedHeader, "1")
	return out
}

// onSession answers a unary request about session id: with run on the
// session when this gateway runs it, else from the replica that does,
// forwarded with call, the method of the request's procedure on the
// client (acpv2connect.SessionServiceClient.Cancel, ...). run's response
// is ignored when it returns an error.
func onSession[Req, Res any](ctx context.Context, s *Service, req *connect.Request[Req], id string,
	call func(acpv2connect.SessionServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	run func(*session.Session) (*Res, error)) (*connect.Response[Res], error) {
	sess, remote, err := s.session(ctx, req.Header(), id)
	if err != nil {
		return nil, err
	}
	if remote != nil {
		res, err := call(remote, ctx, forwarded(remote, req, s.user(ctx)))
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(res.Msg), nil
	}
	res, err := run(sess)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(res), nil
}

// relay copies the owner's Prompt stream to the client.
func relay(in *connect.ServerStreamForClient[acpv2.PromptResponse], h header, send func(*acpv2.PromptResponse) error) error {
	defer in.Close()
	h.Set("X-Accel-Buffering", "no")
	for in.Receive() {
		if err := send(in.Msg()); err != nil {
			return err
		}
	}
	return in.Err()
}
