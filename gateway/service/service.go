// Package service implements the acp.v2 SessionService Connect handlers on
// top of the session manager: it validates requests, maps errors to Connect
// codes, and runs the server streams with heartbeats.
package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/flush"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/replica"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// DefaultHeartbeat is the interval of heartbeats on idle server streams.
const DefaultHeartbeat = 15 * time.Second

// Limits on request contents.
const (
	maxIDLen        = 256
	maxPromptBlocks = 1024
)

// Service implements acpv2connect.SessionServiceHandler.
type Service struct {
	fwd *forwarder
	// fwdSecret and fwdTimeout configure fwd.
	fwdSecret  *replica.Secret
	fwdTimeout time.Duration
	mgr        *session.Manager
	heartbeat  time.Duration
	// writeTimeout bounds each batch of a stream's writes (0: none).
	writeTimeout time.Duration
	user         func(context.Context) string
	metrics      *metrics.Metrics
	maxPrompt    int
	maxResponse  int
}

var _ acpv2connect.SessionServiceHandler = (*Service)(nil)

// Option configures a Service.
type Option func(*Service)

// WithHeartbeat sets the heartbeat interval of server streams; zero or
// less means DefaultHeartbeat.
func WithHeartbeat(d time.Duration) Option { return func(s *Service) { s.heartbeat = d } }

// DefaultStreamWriteTimeout is how long a batch of a Prompt or Watch
// stream's messages may take to reach the client's connection.
const DefaultStreamWriteTimeout = time.Minute

// WithStreamWriteTimeout bounds how long a Prompt or Watch stream may wait
// for its client to take a batch of messages (or a heartbeat); past that
// the stream ends, and the client resumes with Watch afterSeq. A client
// that stops reading but keeps its connection open would otherwise hold
// the stream's goroutine and connection for good. Zero or less sets no
// bound.
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(s *Service) { s.writeTimeout = max(d, 0) }
}

// WithMetrics records the streams' metrics in m.
func WithMetrics(m *metrics.Metrics) Option { return func(s *Service) { s.metrics = m } }

// DefaultMaxPromptBytes bounds the encoded size of a prompt's content.
const DefaultMaxPromptBytes = 1 << 20

// WithMaxPromptBytes bounds the encoded (protobuf) size of a prompt's
// content blocks; a larger prompt is refused with resource_exhausted.
func WithMaxPromptBytes(n int) Option { return func(s *Service) { s.maxPrompt = n } }

// WithReplicaSecret makes the Service forward requests only to replicas
// that prove they hold secret, asserting the caller's user under it
// rather than passing on the caller's credentials (package replica).
func WithReplicaSecret(secret *replica.Secret) Option {
	return func(s *Service) { s.fwdSecret = secret }
}

// WithForwardTimeout sets how long a request forwarded to the replica
// that runs its session waits for that replica: to connect, to prove the
// replica secret, and for a sign of life (an answer, a message of a
// stream, or an answer to a probe of its liveness) before a probe, which
// must answer within it too. A replica that does not is treated as gone:
// the request ends unavailable, saying to retry. Zero or less means
// DefaultForwardTimeout.
func WithForwardTimeout(d time.Duration) Option {
	return func(s *Service) { s.fwdTimeout = d }
}

// WithUser sets how the calling user is found from a request's context.
func WithUser(f func(context.Context) string) Option { return func(s *Service) { s.user = f } }

// New returns a Service over mgr.
func New(mgr *session.Manager, opts ...Option) *Service {
	s := &Service{mgr: mgr, heartbeat: DefaultHeartbeat, writeTimeout: DefaultStreamWriteTimeout, maxPrompt: DefaultMaxPromptBytes, user: func(context.Context) string { return "" }}
	for _, o := range opts {
		o(s)
	}
	if s.fwdTimeout <= 0 {
		s.fwdTimeout = DefaultForwardTimeout
	}
	s.fwd = newForwarder(s.fwdTimeout, s.fwdSecret)
	if s.maxResponse <= 0 {
		s.maxResponse = DefaultMaxResponseBytes
	}
	if s.heartbeat <= 0 {
		// A stream's waits end a heartbeat interval after its last
		// message: none would spin.
		s.heartbeat = DefaultHeartbeat
	}
	if s.metrics == nil {
		s.metrics = metrics.New(metrics.Options{MaxSessionSeries: -1})
	}
	return s
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

func checkID(field, v string) error {
	switch {
	case v == "":
		return invalid("%s is required", field)
	case len(v) > maxIDLen:
		return invalid("%s is longer than %d bytes", field, maxIDLen)
	}
	return nil
}

// toConnect maps session errors to Connect codes. Messages carry no
// internal detail beyond what the client may see.
func toConnect(err error) error {
	code := connect.CodeInternal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNotFound), errors.Is(err, statestore.ErrNotFound), errors.Is(err, session.ErrNoRequest):
		code = connect.CodeNotFound
	case errors.Is(err, session.ErrUnknownAgent), errors.Is(err, session.ErrInvalid):
		code = connect.CodeInvalidArgument
	case errors.Is(err, session.ErrBusy), errors.Is(err, session.ErrNoTurn), errors.Is(err, session.ErrClosed),
		errors.Is(err, session.ErrAlreadyAnswered), errors.Is(err, session.ErrCannotReattach),
		errors.Is(err, session.ErrUnsupported), errors.Is(err, session.ErrAgentRefused),
		errors.Is(err, session.ErrAdoptionOff), errors.Is(err, session.ErrAdopted):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, session.ErrAgentGone), errors.Is(err, session.ErrAgentStart), errors.Is(err, session.ErrShutdown), errors.Is(err, session.ErrMoved),
		errors.Is(err, session.ErrStoreUnavailable), errors.Is(err, session.ErrStoreRecovering):
		code = connect.CodeUnavailable
	case errors.Is(err, session.ErrDataLost):
		code = connect.CodeDataLoss
	case errors.Is(err, session.ErrLagging):
		code = connect.CodeAborted
	case errors.Is(err, session.ErrLimit):
		code = connect.CodeResourceExhausted
	case errors.Is(err, session.ErrPermission):
		code = connect.CodePermissionDenied
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	if code == connect.CodeInternal {
		return connect.NewError(code, &internalError{err})
	}
	return connect.NewError(code, saidOnce(code, err))
}

// saidOnce drops from err's message a leading word of its code's (the
// session's ErrInvalid is "invalid argument: ...", ErrPermission
// "permission denied: ..."), which the client already prints before it:
// `invalid_argument: invalid argument: cwd ...` says it twice.
func saidOnce(code connect.Code, err error) error {
	words := strings.ReplaceAll(code.String(), "_", " ")
	if msg, ok := strings.CutPrefix(err.Error(), words+": "); ok && msg != "" {
		return &restated{msg: msg, err: err}
	}
	return err
}

// restated is err with another message; errors.Is and As still see err.
type restated struct {
	msg string
	err error
}

func (e *restated) Error() string { return e.msg }
func (e *restated) Unwrap() error { return e.err }

// internalError hides its cause from clients (its message is just
// "internal error") but keeps it for the access log.
type internalError struct{ cause error }

func (e *internalError) Error() string { return "internal error" }

// session returns the local session id, or the client of the replica that
// runs it, to which the request is forwarded.
func (s *Service) session(ctx context.Context, h http.Header, id string) (*session.Session, *remote, error) {
	if err := checkID("session_id", id); err != nil {
		return nil, nil, err
	}
	sess, err := s.mgr.Get(ctx, s.user(ctx), id)
	var elsewhere *session.RemoteError
	if errors.As(err, &elsewhere) {
		r, err := s.fwd.remote(ctx, h, elsewhere.Holder)
		return nil, r, err
	}
	if err != nil {
		return nil, nil, toConnect(err)
	}
	return sess, nil, nil
}

// CreateSession implements acpv2connect.SessionServiceHandler.
func (s *Service) CreateSession(ctx context.Context, req *connect.Request[acpv2.CreateSessionRequest]) (*connect.Response[acpv2.CreateSessionResponse], error) {
	m := req.Msg
	if err := checkID("agent", m.GetAgent()); err != nil {
		return nil, err
	}
	// An empty cwd asks for a new directory, where the gateway makes them
	// (the manager refuses it otherwise).
	if m.GetCwd() != "" && !filepath.IsAbs(m.GetCwd()) {
		return nil, invalid("cwd must be an absolute path, or empty for a new workspace; got %q", m.GetCwd())
	}
	if len(m.GetAuthMethod()) > maxIDLen {
		return nil, invalid("auth_method is longer than %d bytes", maxIDLen)
	}
	if len(m.GetAdoptAgentSessionId()) > maxIDLen {
		return nil, invalid("adopt_agent_session_id is longer than %d bytes", maxIDLen)
	}
	mcp, err := mcpServers(m.GetMcpServers())
	if err != nil {
		return nil, err
	}
	var sess *session.Session
	if id := m.GetAdoptAgentSessionId(); id != "" {
		sess, err = s.mgr.Adopt(ctx, s.user(ctx), m.GetAgent(), id, m.GetCwd(), m.GetAuthMethod(), mcp...)
	} else {
		sess, err = s.mgr.Create(ctx, s.user(ctx), m.GetAgent(), m.GetCwd(), m.GetAuthMethod(), mcp...)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&acpv2.CreateSessionResponse{SessionId: sess.ID()}), nil
}

// Prompt implements acpv2connect.SessionServiceHandler.
func (s *Service) Prompt(ctx context.Context, req *connect.Request[acpv2.PromptRequest], stream *connect.ServerStream[acpv2.PromptResponse]) error {
	m := req.Msg
	if len(m.GetPrompt()) == 0 {
		return invalid("prompt needs at least one content block")
	}
	if len(m.GetPrompt()) > maxPromptBlocks {
		return invalid("prompt has more than %d content blocks", maxPromptBlocks)
	}
	for i, b := range m.GetPrompt() {
		if b.GetBlock() == nil {
			return invalid("prompt[%d] is an empty content block", i)
		}
		if err := checkValues(b.ProtoReflect(), fmt.Sprintf("prompt[%d]", i)); err != nil {
			return err
		}
	}
	if n := proto.Size(&acpv2.PromptRequest{Prompt: m.GetPrompt()}); s.maxPrompt > 0 && n > s.maxPrompt {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"the prompt is %d bytes; this gateway takes prompts of at most %d bytes", n, s.maxPrompt))
	}
	sess, remote, err := s.session(ctx, req.Header(), m.GetSessionId())
	if err != nil {
		return err
	}
	if remote != nil {
		ctx, stop := remote.watch(ctx)
		defer stop()
		in, err := remote.Prompt(ctx, forwarded(remote, req, s.user(ctx)))
		if err != nil {
			return failed(ctx, err, "")
		}
		return relay(ctx, remote, in, stream.ResponseHeader(), stream.Send)
	}
	sub, err := sess.Prompt(ctx, m.GetPrompt())
	if err != nil {
		return toConnect(err)
	}
	defer sub.Close()
	// One response carries every message: Send has marshalled it when it
	// returns. It goes with the event's encoding, which the codec writes
	// rather than marshal the event.
	resp := &acpv2.PromptResponse{}
	reply := &encoded.Reply{Message: resp}
	return s.pump(ctx, "Prompt", deltasOnly(sub, m.GetDeltasOnly()), stream.ResponseHeader(), func(ev *encoded.Event, hb *timestamppb.Timestamp) (bool, error) {
		msg, err := messageOf(ev)
		if err != nil {
			return false, err
		}
		resp.Event, resp.Heartbeat, reply.Event = msg, hb, ev
		err = stream.Conn().Send(reply)
		resp.Event, resp.Heartbeat, reply.Event = nil, nil, nil
		if err != nil {
			return false, err
		}
		return ev != nil && ev.Kind() == encoded.TurnEnded, nil
	})
}

// Watch implements acpv2connect.SessionServiceHandler.
func (s *Service) Watch(ctx context.Context, req *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	if err := checkID("session_id", req.Msg.GetSessionId()); err != nil {
		return err
	}
	sub, err := s.mgr.Watch(ctx, s.user(ctx), req.Msg.GetSessionId(), req.Msg.GetAfterSeq())
	if err != nil {
		return toConnect(err)
	}
	defer sub.Close()
	resp := &acpv2.WatchResponse{} // as Prompt's
	reply := &encoded.Reply{Message: resp}
	isJSON := jsonCodec(req.Header())
	err = s.pump(ctx, "Watch", deltasOnly(sub, req.Msg.GetDeltasOnly()), stream.ResponseHeader(), func(ev *encoded.Event, hb *timestamppb.Timestamp) (bool, error) {
		msg, err := messageOf(ev)
		if err != nil {
			return false, err
		}
		if snap := msg.GetSnapshot(); snap != nil {
			// Sent in place of events retention dropped: fitted as
			// GetSession's, and encoded afresh when trimmed.
			if fitted := s.fit(snap, isJSON); fitted != snap {
				msg = &acpv2.SessionEvent{Seq: msg.GetSeq(), Time: msg.GetTime(),
					Event: &acpv2.SessionEvent_Snapshot{Snapshot: fitted}}
				if ev, err = encoded.New(msg); err != nil {
					return false, err
				}
			}
		}
		resp.Event, resp.Heartbeat, reply.Event = msg, hb, ev
		err = stream.Conn().Send(reply)
		resp.Event, resp.Heartbeat, reply.Event = nil, nil, nil
		return false, err
	})
	if errors.Is(err, session.ErrClosed) {
		return nil // the session ended: so does the stream
	}
	return err
}

// messageOf returns ev's message, nil for no event (a heartbeat).
func messageOf(ev *encoded.Event) (*acpv2.SessionEvent, error) {
	if ev == nil {
		return nil, nil
	}
	return ev.Message()
}

type header interface{ Set(key, value string) }

// deltasOnly returns sub, or when on is set, sub without its merged
// tool-call events (WatchRequest.deltas_only).
func deltasOnly(sub session.Stream, on bool) session.Stream {
	if !on {
		return sub
	}
	return withoutMerged{sub}
}

// withoutMerged is a stream that leaves out the merged tool-call events.
// Its LastSeq is its stream's: a client resuming after it skips what was
// left out too.
type withoutMerged struct{ session.Stream }

func (w withoutMerged) NextBatch(ctx context.Context, dst []*encoded.Event) (int, error) {
	for {
		n, err := w.Stream.NextBatch(ctx, dst)
		if err != nil {
			return 0, err
		}
		kept := 0
		for _, ev := range dst[:n] {
			if ev.Kind() != encoded.ToolCall {
				dst[kept] = ev
				kept++
			}
		}
		clear(dst[kept:n])
		if kept > 0 {
			return kept, nil
		}
	}
}

func (w withoutMerged) OnStall(writing func() uint64, stall func()) {
	onStall(w.Stream, writing, stall)
}

// onStall has stall called when sub, if it is a session's subscription,
// was cut off for lagging while the write that writing names is stuck
// (session.Subscription.OnStall).
func onStall(sub session.Stream, writing func() uint64, stall func()) {
	if st, ok := sub.(interface{ OnStall(func() uint64, func()) }); ok {
		st.OnStall(writing, stall)
	}
}

// batchSize is the most events a stream sends with one flush.
const batchSize = 64

// pump sends sub's events through send, starting with a heartbeat and
// then heartbeats while idle, until send says stop, the subscription ends or
// the client goes.
//
// It runs in the handler's goroutine alone: it waits for events, the
// heartbeat or the client's end, then sends the events at hand as one
// batch, holding the flushes connect does after each message until the
// last one. A stream that falls the watch buffer behind is cut off even
// while a write of it is blocked on a client that reads nothing: the
// session says so (OnStall) and the write is interrupted.
func (s *Service) pump(ctx context.Context, rpc string, sub session.Stream, h header, send func(*encoded.Event, *timestamppb.Timestamp) (bool, error)) error {
	defer s.metrics.StreamOpened(rpc)()
	// Tell buffering proxies (nginx) to pass the stream through.
	h.Set("X-Accel-Buffering", "no")
	fw := flush.From(ctx)
	fw.SetWriteTimeout(s.writeTimeout)
	stalled := new(atomic.Bool)
	if fw != nil {
		onStall(sub, fw.Writing, func() {
			stalled.Store(true)
			fw.Interrupt()
		})
	}
	// Open the stream at once: response headers only reach the client with
	// the first message, and a watched session may be idle for long.
	if _, err := send(nil, timestamppb.Now()); err != nil {
		return err
	}
	batch := make([]*encoded.Event, batchSize)
	last := time.Now() // of the last message sent
	for {
		// Waits for events end at this deadline, a heartbeat interval
		// after the last message; it is set again when it passes, not for
		// every batch.
		wait, cancel := context.WithDeadline(ctx, last.Add(s.heartbeat))
		done, err := s.sendEvents(wait, rpc, sub, fw, batch, send, &last, stalled)
		cancel()
		switch {
		case done:
			return err
		case ctx.Err() != nil:
			if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
				// The gateway is shutting down (server.ErrShuttingDown):
				// an interruption, which the client should resume.
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
					"%w; resume with Watch afterSeq=%d, on another replica or once this one is back", cause, sub.LastSeq()))
			}
			return nil // the client went
		}
		if now := time.Now(); now.Sub(last) >= s.heartbeat {
			if _, err := send(nil, timestamppb.New(now)); err != nil {
				if stalled.Load() { // interrupted as the last batch went
					return s.cutOff(rpc, sub.LastSeq())
				}
				return err
			}
			last = now
		}
	}
}

// sendEvents sends sub's events in batches until wait ends (done is then
// false: time for a heartbeat, maybe) or the stream is done. It sets *last
// to the time of each batch. stalled says the writes were interrupted
// because the stream was cut off for lagging.
func (s *Service) sendEvents(wait context.Context, rpc string, sub session.Stream, fw *flush.Writer, batch []*encoded.Event,
	send func(*encoded.Event, *timestamppb.Timestamp) (bool, error), last *time.Time, stalled *atomic.Bool) (done bool, err error) {
	for {
		n, err := sub.NextBatch(wait, batch)
		switch {
		case err != nil && wait.Err() != nil:
			// An ending that raced with the deadline comes again.
			return false, nil //nolint:nilerr // the next call sees the ending again, with no deadline to race

		case errors.Is(err, session.ErrLagging):
			return true, s.cutOff(rpc, sub.LastSeq())
		case errors.Is(err, session.ErrMoved):
			return true, connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"%w; resume with Watch afterSeq=%d", err, sub.LastSeq()))
		case err != nil:
			return true, toConnect(err)
		}
		sent, stop, err := sendBatch(fw, batch[:n], send)
		s.metrics.EventsSent(rpc, sent)
		before := batch[0].Seq() - 1
		clear(batch[:n])
		if err != nil && stalled.Load() {
			// Cut off while blocked in this batch's writes, of which
			// any part may have gone.
			return true, s.cutOff(rpc, before)
		}
		if err != nil || stop {
			return true, err
		}
		*last = time.Now()
	}
}

// cutOff is the end of a stream that fell too far behind, which resumes
// after seq.
func (s *Service) cutOff(rpc string, seq uint64) error {
	s.metrics.CutOff(rpc)
	return connect.NewError(connect.CodeAborted, fmt.Errorf(
		"this stream fell too far behind and was cut off; resume with Watch afterSeq=%d", seq))
}

// sendBatch sends events with their writes gathered and one flush, after
// the last, until send says stop or fails. It returns how many it sent.
func sendBatch(fw *flush.Writer, events []*encoded.Event, send func(*encoded.Event, *timestamppb.Timestamp) (bool, error)) (sent int, stop bool, err error) {
	fw.Hold()
	defer func() {
		if rerr := fw.Release(); err == nil {
			err = rerr
		}
	}()
	for i, ev := range events {
		stop, err := send(ev, nil)
		if err != nil {
			return i, false, err
		}
		if stop {
			return i + 1, true, nil
		}
	}
	return len(events), false, nil
}

// Cancel implements acpv2connect.SessionServiceHandler.
func (s *Service) Cancel(ctx context.Context, req *connect.Request[acpv2.CancelRequest]) (*connect.Response[acpv2.CancelResponse], error) {
	return onSession(ctx, s, req, req.Msg.GetSessionId(), acpv2connect.SessionServiceClient.Cancel,
		func(sess *session.Session) (*acpv2.CancelResponse, error) {
			return &acpv2.CancelResponse{}, sess.Cancel(ctx)
		})
}

// RespondPermission implements acpv2connect.SessionServiceHandler.
func (s *Service) RespondPermission(ctx context.Context, req *connect.Request[acpv2.RespondPermissionRequest]) (*connect.Response[acpv2.RespondPermissionResponse], error) {
	m := req.Msg
	if err := checkID("request_id", m.GetRequestId()); err != nil {
		return nil, err
	}
	if m.GetCancelled() == (m.GetOptionId() != "") {
		return nil, invalid("give exactly one of option_id and cancelled")
	}
	return onSession(ctx, s, req, m.GetSessionId(), acpv2connect.SessionServiceClient.RespondPermission,
		func(sess *session.Session) (*acpv2.RespondPermissionResponse, error) {
			return &acpv2.RespondPermissionResponse{}, sess.RespondPermission(m.GetRequestId(), m.GetOptionId(), m.GetCancelled(), s.user(ctx))
		})
}

// RespondElicitation implements acpv2connect.SessionServiceHandler.
func (s *Service) RespondElicitation(ctx context.Context, req *connect.Request[acpv2.RespondElicitationRequest]) (*connect.Response[acpv2.RespondElicitationResponse], error) {
	m := req.Msg
	if err := checkID("request_id", m.GetRequestId()); err != nil {
		return nil, err
	}
	if c := m.GetContent(); c != nil {
		if err := checkValues(c.ProtoReflect(), "content"); err != nil {
			return nil, err
		}
	}
	return onSession(ctx, s, req, m.GetSessionId(), acpv2connect.SessionServiceClient.RespondElicitation,
		func(sess *session.Session) (*acpv2.RespondElicitationResponse, error) {
			return &acpv2.RespondElicitationResponse{}, sess.RespondElicitation(m.GetRequestId(), m.GetAction(), m.GetContent(), s.user(ctx))
		})
}

// GetSession implements acpv2connect.SessionServiceHandler.
func (s *Service) GetSession(ctx context.Context, req *connect.Request[acpv2.GetSessionRequest]) (*connect.Response[acpv2.GetSessionResponse], error) {
	if err := checkID("session_id", req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	snap, err := s.mgr.Snapshot(ctx, s.user(ctx), req.Msg.GetSessionId())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&acpv2.GetSessionResponse{Session: s.fit(snap, jsonCodec(req.Header()))}), nil
}

// ListSessions implements acpv2connect.SessionServiceHandler.
func (s *Service) ListSessions(ctx context.Context, _ *connect.Request[acpv2.ListSessionsRequest]) (*connect.Response[acpv2.ListSessionsResponse], error) {
	sums, err := s.mgr.Summaries(ctx, s.user(ctx))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&acpv2.ListSessionsResponse{Sessions: sums}), nil
}

// CloseSession implements acpv2connect.SessionServiceHandler.
func (s *Service) CloseSession(ctx context.Context, req *connect.Request[acpv2.CloseSessionRequest]) (*connect.Response[acpv2.CloseSessionResponse], error) {
	return onSession(ctx, s, req, req.Msg.GetSessionId(), acpv2connect.SessionServiceClient.CloseSession,
		func(sess *session.Session) (*acpv2.CloseSessionResponse, error) {
			return &acpv2.CloseSessionResponse{}, sess.Close()
		})
}

// DeleteSession implements acpv2connect.SessionServiceHandler.
func (s *Service) DeleteSession(ctx context.Context, req *connect.Request[acpv2.DeleteSessionRequest]) (*connect.Response[acpv2.DeleteSessionResponse], error) {
	return onSession(ctx, s, req, req.Msg.GetSessionId(), acpv2connect.SessionServiceClient.DeleteSession,
		func(sess *session.Session) (*acpv2.DeleteSessionResponse, error) {
			return &acpv2.DeleteSessionResponse{}, sess.Delete()
		})
}

// Logout implements acpv2connect.SessionServiceHandler.
func (s *Service) Logout(ctx context.Context, req *connect.Request[acpv2.LogoutRequest]) (*connect.Response[acpv2.LogoutResponse], error) {
	return onSession(ctx, s, req, req.Msg.GetSessionId(), acpv2connect.SessionServiceClient.Logout,
		func(sess *session.Session) (*acpv2.LogoutResponse, error) {
			return &acpv2.LogoutResponse{}, sess.Logout(ctx)
		})
}

// SetMode implements acpv2connect.SessionServiceHandler.
func (s *Service) SetMode(ctx context.Context, req *connect.Request[acpv2.SetModeRequest]) (*connect.Response[acpv2.SetModeResponse], error) {
	if err := checkID("mode_id", req.Msg.GetModeId()); err != nil {
		return nil, err
	}
	return onSession(ctx, s, req, req.Msg.GetSessionId(), acpv2connect.SessionServiceClient.SetMode,
		func(sess *session.Session) (*acpv2.SetModeResponse, error) {
			return &acpv2.SetModeResponse{}, sess.SetMode(ctx, req.Msg.GetModeId())
		})
}

// SetConfigOption implements acpv2connect.SessionServiceHandler.
func (s *Service) SetConfigOption(ctx context.Context, req *connect.Request[acpv2.SetConfigOptionRequest]) (*connect.Response[acpv2.SetConfigOptionResponse], error) {
	m := req.Msg
	if err := checkID("config_id", m.GetConfigId()); err != nil {
		return nil, err
	}
	var value any
	switch v := m.GetValue().(type) {
	case *acpv2.SetConfigOptionRequest_ValueId:
		if err := checkID("value_id", v.ValueId); err != nil {
			return nil, err
		}
		value = v.ValueId
	case *acpv2.SetConfigOptionRequest_Boolean:
		value = v.Boolean
	default:
		return nil, invalid("give one of value_id and boolean")
	}
	return onSession(ctx, s, req, m.GetSessionId(), acpv2connect.SessionServiceClient.SetConfigOption,
		func(sess *session.Session) (*acpv2.SetConfigOptionResponse, error) {
			opts, err := sess.SetConfigOption(ctx, m.GetConfigId(), value)
			return &acpv2.SetConfigOptionResponse{ConfigOptions: opts}, err
		})
}
