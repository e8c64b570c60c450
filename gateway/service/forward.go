package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// DefaultForwardTimeout is how long a replica waits for the replica it
// forwards a request to: to connect, and for a sign of life.
const DefaultForwardTimeout = 5 * time.Second

// livenessPath is where a replica shows it is alive: any answer will do.
const livenessPath = "/healthz"

// forwarder holds a client per replica that requests are forwarded to.
//
// A request that needs a session's agent (Prompt, Cancel,
// RespondPermission, RespondElicitation, CloseSession, Logout, SetMode,
// SetConfigOption) and lands on a replica that does not run it is sent on
// to the owner's advertised address
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
//
// An owner that stops answering, such as a frozen process, whose kernel
// still accepts connections, is not waited on: a forwarded call ends
// unavailable when the owner shows no sign of life (a response, a message
// of a stream, heartbeats included, or an answer at its livenessPath) for
// the forward timeout, and then does not answer a probe of its liveness
// within the timeout either (remote.watch). A slow call of a live owner,
// such as a Prompt that starts a new agent, is not cut. A frozen owner
// renews no lease: once its leases lapse, its sessions are taken over
// like a dead replica's, and the client's retry reaches them.
type forwarder struct {
	http    *http.Client
	secret  *replica.Secret
	timeout time.Duration

	mu    sync.Mutex
	peers map[string]*peer
}

func newForwarder(timeout time.Duration, secret *replica.Secret) *forwarder {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(true)
	return &forwarder{
		http: &http.Client{
			Transport: &http.Transport{
				Protocols:           p,
				DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
				TLSHandshakeTimeout: timeout,
				// A connection to a replica that died or froze is not kept
				// for ever.
				IdleConnTimeout: 90 * time.Second,
			},
			// A replica answers itself: a redirect would send the request,
			// and its assertion, elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		secret:  secret,
		timeout: timeout,
		peers:   map[string]*peer{},
	}
}

// peer is a replica that requests are forwarded to.
type peer struct {
	client acpv2connect.SessionServiceClient
	// seen is when it last showed it is alive, as a since().
	seen atomic.Int64
}

// saw notes that the peer is alive.
func (p *peer) saw() { p.seen.Store(since()) }

// epoch is what since counts from.
var epoch = time.Now()

// since returns the time since epoch, in nanoseconds, on the monotonic
// clock.
func since() int64 { return int64(time.Since(epoch)) }

// remote is the replica a request is forwarded to.
type remote struct {
	acpv2connect.SessionServiceClient
	holder string
	secret *replica.Secret
	fwd    *forwarder
	peer   *peer
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
	verified := false
	if f.secret != nil {
		vctx, cancel := context.WithTimeout(ctx, f.timeout)
		err := f.secret.Verify(vctx, f.http, holder)
		cancel()
		if err != nil {
			if errors.Is(err, replica.ErrUnreachable) {
				// The owner is down, frozen or restarting while its lease
				// lasts: once it is back, or its lease lapses, a retry
				// goes through.
				return nil, connect.NewError(connect.CodeUnavailable,
					errors.New("the gateway replica that runs the session did not answer; retry"))
			}
			// A wrong or missing proof: the client learns nothing of the
			// address; the access log tells the operator.
			return nil, connect.NewError(connect.CodeInternal, &internalError{fmt.Errorf(
				"not forwarding to the session's replica as the store names it: %w", err)})
		}
		verified = true
	}
	f.mu.Lock()
	p := f.peers[holder]
	if p == nil {
		p = &peer{client: acpv2connect.NewSessionServiceClient(f.http, holder, connect.WithGRPC())}
		f.peers[holder] = p
	}
	f.mu.Unlock()
	if verified {
		p.saw() // it just answered
	}
	return &remote{SessionServiceClient: p.client, holder: holder, secret: f.secret, fwd: f, peer: p}, nil
}

// errSilent cancels a forwarded call whose replica stopped answering.
var errSilent = errors.New("the gateway replica that runs the session stopped answering")

// watch returns ctx for a call forwarded to r, and stop, which ends the
// watch once the call is done. The context is cancelled (its cause
// errSilent) when r shows no sign of life for the forward timeout from
// the call's start and then does not answer a probe within the timeout
// either: a frozen or dead replica. Each answer to a probe starts the wait
// again.
func (r *remote) watch(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	start := since()
	done := make(chan struct{})
	go func() {
		timer := time.NewTimer(r.fwd.timeout)
		defer timer.Stop()
		for {
			wait := time.Duration(max(start, r.peer.seen.Load())-since()) + r.fwd.timeout
			if wait <= 0 {
				if !r.alive(ctx) {
					cancel(errSilent)
					return
				}
				if ctx.Err() != nil {
					return
				}
				continue
			}
			timer.Reset(wait)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
	}
}

// alive asks r whether it is alive, at its livenessPath: any HTTP answer
// within the forward timeout is a yes. A probe cut short by ctx is a yes
// too: the call it watches has ended.
func (r *remote) alive(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, r.fwd.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, strings.TrimSuffix(r.holder, "/")+livenessPath, nil)
	if err != nil {
		return false
	}
	res, err := r.fwd.http.Do(req)
	if err != nil {
		return ctx.Err() != nil
	}
	res.Body.Close()
	r.peer.saw()
	return true
}

// failed returns the error of a call forwarded under ctx (from watch):
// unavailable, saying to retry, when it was cut off because the replica
// stopped answering, else err. resume, when not empty, says how to resume
// a stream.
func failed(ctx context.Context, err error, resume string) error {
	if err == nil || !errors.Is(context.Cause(ctx), errSilent) {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w; retry%s", errSilent, resume))
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
		ctx, stop := remote.watch(ctx)
		defer stop()
		res, err := call(remote, ctx, forwarded(remote, req, s.user(ctx)))
		if err != nil {
			return nil, failed(ctx, err, "")
		}
		return connect.NewResponse(res.Msg), nil
	}
	res, err := run(sess)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(res), nil
}

// relay copies the owner's Prompt stream, forwarded under ctx (from
// watch), to the client.
func relay(ctx context.Context, r *remote, in *connect.ServerStreamForClient[acpv2.PromptResponse], h header, send func(*acpv2.PromptResponse) error) error {
	defer in.Close()
	h.Set("X-Accel-Buffering", "no")
	var last uint64
	for in.Receive() {
		r.peer.saw()
		if ev := in.Msg().GetEvent(); ev != nil {
			last = ev.GetSeq()
		}
		if err := send(in.Msg()); err != nil {
			return err
		}
	}
	resume := ""
	if last > 0 {
		resume = fmt.Sprintf(", or resume with Watch afterSeq=%d", last)
	}
	return failed(ctx, in.Err(), resume)
}
