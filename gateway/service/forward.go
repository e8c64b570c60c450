package service

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// ForwardedHeader marks a request one replica forwarded to the replica
// that runs the session. A forwarded request is never forwarded again, so
// two replicas that disagree about ownership cannot loop.
const ForwardedHeader = "Acp-Gateway-Forwarded"

// forwarder holds a client per replica that requests are forwarded to.
//
// A request that needs a session's agent (Prompt, Cancel,
// RespondPermission, CloseSession, SetMode, SetConfigOption) and lands on a
// replica that does not run it is sent on to the owner's advertised address
// with the same Connect API, rather than through Redis: the owner already
// serves that API (streams included, with their heartbeats and errors), the
// caller's credentials travel with the request and are checked by the owner
// as by any replica, and nothing new has to be kept consistent in Redis.
type forwarder struct {
	http *http.Client

	mu      sync.Mutex
	clients map[string]acpv2connect.SessionServiceClient
}

func newForwarder() *forwarder {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(true)
	return &forwarder{
		http:    &http.Client{Transport: &http.Transport{Protocols: p}},
		clients: map[string]acpv2connect.SessionServiceClient{},
	}
}

// client returns the client for the owning replica, or an error when the
// request was itself forwarded.
func (f *forwarder) client(h http.Header, holder string) (acpv2connect.SessionServiceClient, error) {
	if h.Get(ForwardedHeader) != "" {
		return nil, connect.NewError(connect.CodeUnavailable,
			errors.New("the session moved between gateway replicas; retry"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.clients[holder]
	if c == nil {
		c = acpv2connect.NewSessionServiceClient(f.http, holder, connect.WithGRPC())
		f.clients[holder] = c
	}
	return c, nil
}

// forwarded copies a request for the owning replica, keeping the caller's
// credentials and trace context.
func forwarded[T any](in *connect.Request[T]) *connect.Request[T] {
	out := connect.NewRequest(in.Msg)
	for _, k := range []string{"Authorization", "Traceparent", "Tracestate", "X-Request-Id"} {
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
		res, err := call(remote, ctx, forwarded(req))
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
