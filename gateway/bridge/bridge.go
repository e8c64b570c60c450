package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// Options configure [Serve].
type Options struct {
	// Client calls the gateway; [NewClient] makes one that sends a bearer
	// token. Required.
	Client acpv2connect.SessionServiceClient
	// Agent is the name of the gateway agent that new sessions run.
	// Required.
	Agent string
	// Follow makes the bridge follow each session the editor creates or
	// attaches to for as long as it is connected, so that it sees the
	// turns other clients run and is asked their permission requests
	// (first answer wins; a request answered elsewhere is withdrawn with
	// $/cancel_request), not only its own turns.
	Follow bool
	// ChooseAgent lets the client name another agent for a new session in
	// session/new's `_meta`: `{"acpGateway": {"agent": "NAME"}}` (the
	// gateway refuses a name it does not know); and session/list then
	// lists the sessions of every agent.
	ChooseAgent bool
	// CheckGateway makes initialize ask the gateway for its agents first
	// (ListAgents), and fail with a JSON-RPC error saying why when the
	// gateway cannot be reached, refuses the token, or has no agent
	// [Options.Agent]: an editor then shows the problem at once, rather
	// than at its first session. For a bridge over the network
	// (`acp-gateway connect`); one in the gateway's own process has no
	// need.
	CheckGateway bool
	// Cwd, when set, is the working directory given to the gateway for new
	// sessions instead of the one the editor sends, which need not exist
	// on the gateway's machine.
	Cwd string
	// KeepSessions leaves the sessions the bridge created open when the
	// editor goes, so that a later session/load can replay them. By default
	// they are closed.
	KeepSessions bool
	// Version is the bridge's version in the initialize answer ("dev" when
	// empty).
	Version string
	// Log receives diagnostics (never the protocol); nil discards them.
	Log *slog.Logger
	// MaxLine bounds one line from the editor; zero means DefaultMaxLine.
	MaxLine int
}

// closeTimeout bounds the closing of the bridge's sessions once the editor
// has gone.
const closeTimeout = 10 * time.Second

// Serve speaks ACP as an agent on in (the editor's requests) and out (the
// answers and notifications), one JSON-RPC message per line, relaying every
// session to the gateway, until in ends or ctx ends. It then closes the
// gateway sessions it created (unless [Options.KeepSessions]) and returns
// nil. Serve closes in and out when they implement io.Closer, so that a
// read blocked on in ends too.
//
// Serve returns an error only for invalid options.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	return serve(ctx, newLineStream(in, out, opts.MaxLine), opts)
}

// ServeMessages is [Serve] over any transport of whole messages, such as a
// WebSocket: it serves ACP on m until m's Read fails or ctx ends, then
// closes m. [Options.MaxLine] is m's business.
func ServeMessages(ctx context.Context, m Messages, opts Options) error {
	return serve(ctx, &objectStream{m: m}, opts)
}

func serve(ctx context.Context, stream *objectStream, opts Options) error {
	if opts.Client == nil {
		return errors.New("bridge: Options.Client is required")
	}
	if opts.Agent == "" {
		return errors.New("bridge: Options.Agent is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	base, stop := context.WithCancel(ctx)
	defer stop()
	b := &bridge{
		stream:   stream,
		opts:     opts,
		client:   opts.Client,
		log:      opts.Log,
		base:     base,
		ready:    make(chan struct{}),
		sessions: map[string]*session{},
		inflight: map[jsonrpc2.ID]func(){},
		version:  acpjson.V1,
	}
	if p, ok := stream.m.(Positioned); ok {
		p.Bind(b)
	}
	// jsonrpc2's own logging is silenced: the bridge logs what matters.
	b.conn = jsonrpc2.NewConn(base, stream, b, jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
	close(b.ready)
	select {
	case <-b.conn.DisconnectNotify():
		b.log.Info("the editor closed the connection")
	case <-ctx.Done():
		b.log.Info("stopping", "reason", context.Cause(ctx))
	}
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	stop()
	_ = b.conn.Close()
	b.wg.Wait()
	b.closeSessions(context.WithoutCancel(ctx))
	return nil
}

// bridge is the state of one Serve call.
type bridge struct {
	opts   Options
	client acpv2connect.SessionServiceClient
	log    *slog.Logger
	conn   *jsonrpc2.Conn
	// stream is conn's: session/update notifications are written to it
	// directly, with their place in the session's log (writeAt).
	stream *objectStream
	// base is the parent of every call's context; it ends when the
	// editor goes.
	base context.Context
	// ready is closed once conn is set.
	ready chan struct{}
	wg    sync.WaitGroup
	// nextID numbers the bridge's own requests to the editor, a space
	// apart from the ids of the editor's requests.
	nextID atomic.Uint64

	mu      sync.Mutex
	closing bool
	version acpjson.Version
	// elicit holds the elicitation modes the editor advertised at
	// initialize (elicit.go).
	elicit   map[string]bool
	sessions map[string]*session
	// inflight maps the editor's pending requests to what cancels them,
	// for $/cancel_request.
	inflight map[jsonrpc2.ID]func()
}

// session is one gateway session the editor uses through the bridge.
type session struct {
	id string
	// created: the bridge made it, so the bridge closes it at the end.
	created bool

	// out orders the session's notifications and guards conv and lastSeq;
	// it is held while writing to the editor, and taken before mu.
	out  sync.Mutex
	conv *converter
	// lastSeq is the last live event handled (handleLive).
	lastSeq uint64
	// mu guards turn, asks and stopFollow, and is never held while
	// writing, so that the read loop, which takes it, never waits on the
	// editor.
	mu   sync.Mutex
	turn *turn
	// asks are the editor's permission requests and elicitations, by the
	// gateway's request id.
	asks map[string]*ask
	// stopFollow ends the session's follower (Options.Follow); nil when
	// none runs.
	stopFollow context.CancelFunc
}

// spawn runs f in a goroutine that Serve waits for; it reports false when
// the bridge is stopping.
func (b *bridge) spawn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return false
	}
	b.wg.Go(f)
	return true
}

// negotiated returns the protocol version agreed at initialize (v1 before).
func (b *bridge) negotiated() acpjson.Version {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version
}

// sessionFor returns the session id, adding it (as not created by the
// bridge) when it is new.
func (b *bridge) sessionFor(id string, created bool) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		return s
	}
	return b.addSessionLocked(id, created)
}

// attach adds session id, as not created by the bridge, and returns it; it
// returns nil when the bridge has the session already.
func (b *bridge) attach(id string) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions[id] != nil {
		return nil
	}
	return b.addSessionLocked(id, false)
}

// addSessionLocked adds session id, which the bridge does not have. b.mu is
// held.
func (b *bridge) addSessionLocked(id string, created bool) *session {
	s := &session{id: id, created: created, conv: newConverter(b.version), asks: map[string]*ask{}}
	b.sessions[id] = s
	return s
}

// method is an ACP method the bridge serves; it runs in its own goroutine.
type method func(ctx context.Context, params json.RawMessage) (any, error)

func (b *bridge) methods(name string) method {
	switch name {
	case "session/new":
		return b.newSession
	case "session/load":
		if b.negotiated() == acpjson.V1 {
			return b.loadSession
		}
	case "session/resume":
		return b.resumeSession
	case "session/list":
		return b.listSessions
	case "session/close":
		return b.closeSession
	case "session/set_mode":
		if b.negotiated() == acpjson.V1 {
			return b.setMode
		}
	case "session/set_config_option":
		return b.setConfigOption
	}
	return nil
}

// Handle implements jsonrpc2.Handler. It runs in the connection's read
// loop, so it only dispatches: every call that reaches the gateway runs in
// its own goroutine, and the loop goes on reading the editor's answers to
// the bridge's own requests.
func (b *bridge) Handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	<-b.ready
	params := json.RawMessage("{}")
	if req.Params != nil && string(*req.Params) != "null" {
		params = *req.Params
	}
	if req.Notif {
		switch req.Method {
		case "session/cancel":
			var p struct {
				SessionID string `json:"sessionId"`
			}
			// Not in the read loop, which must never wait on a session:
			// the turn was recorded when its prompt was read, so it is
			// found all the same.
			if json.Unmarshal(params, &p) == nil {
				b.spawn(func() { b.cancelTurn(p.SessionID) })
			}
		case "$/cancel_request":
			var p struct {
				RequestID jsonrpc2.ID `json:"requestId"`
			}
			if json.Unmarshal(params, &p) == nil {
				b.mu.Lock()
				cancel := b.inflight[p.RequestID]
				b.mu.Unlock()
				if cancel != nil {
					b.spawn(cancel)
				}
			}
		default:
			b.log.Debug("ignoring a notification", "method", req.Method)
		}
		return
	}
	switch req.Method {
	case "initialize":
		if b.opts.CheckGateway {
			b.call(req.ID, nil, func(ctx context.Context) (any, error) {
				if err := b.checkGateway(ctx); err != nil {
					return nil, err
				}
				return b.initialize(params)
			})
			return
		}
		res, err := b.initialize(params)
		b.reply(req.ID, res, err)
		return
	case "session/prompt":
		b.prompt(req.ID, params)
		return
	}
	m := b.methods(req.Method)
	if m == nil {
		b.reply(req.ID, nil, &jsonrpc2.Error{Code: codeMethodNotFound,
			Message: "acp-gateway connect does not serve " + strconv.Quote(req.Method)})
		return
	}
	b.call(req.ID, nil, func(ctx context.Context) (any, error) { return m(ctx, params) })
}

// call runs f for the editor's request id in its own goroutine and answers
// with its result. A $/cancel_request for id cancels f's context, or runs
// onCancel instead when it is set.
func (b *bridge) call(id jsonrpc2.ID, onCancel func(), f func(ctx context.Context) (any, error)) {
	ctx, cancel := context.WithCancel(b.base)
	if onCancel == nil {
		onCancel = cancel
	}
	b.mu.Lock()
	b.inflight[id] = onCancel
	b.mu.Unlock()
	ok := b.spawn(func() {
		defer cancel()
		res, err := f(ctx)
		b.mu.Lock()
		delete(b.inflight, id)
		b.mu.Unlock()
		switch {
		case errors.Is(err, errReplied), b.base.Err() != nil:
			return // answered, or the editor is gone
		case err != nil && ctx.Err() != nil:
			err = &jsonrpc2.Error{Code: codeRequestCancelled, Message: "request cancelled"}
		}
		b.reply(id, res, err)
	})
	if !ok {
		cancel()
	}
}

// errReplied is returned by a call that answered the editor itself.
var errReplied = errors.New("answered already")

// reply answers the editor's request id with res, or with err.
func (b *bridge) reply(id jsonrpc2.ID, res any, err error) {
	if err != nil {
		var rerr *jsonrpc2.Error
		if !errors.As(err, &rerr) {
			rerr = &jsonrpc2.Error{Code: codeInternal, Message: err.Error()}
		}
		_ = b.conn.ReplyWithError(b.base, id, rerr)
		return
	}
	if res == nil {
		res = struct{}{}
	}
	_ = b.conn.Reply(b.base, id, res)
}

// notify sends the editor one session/update notification that no event
// of the session made.
func (b *bridge) notify(sessionID string, update json.RawMessage) {
	params := struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}{sessionID, update}
	if err := b.conn.Notify(b.base, "session/update", params); err != nil {
		b.log.Debug("session/update not sent", "session", sessionID, "error", err)
	}
}

// emitLocked sends the editor the updates that event ev of session s
// makes. s.out must be held.
func (b *bridge) emitLocked(s *session, ev *acpv2.SessionEvent, replay bool) {
	updates, err := s.conv.updates(ev, replay)
	if err != nil {
		b.log.Warn("an event could not be converted for the editor", "session", s.id, "error", err)
	}
	b.emitAtLocked(s, ev.GetSeq(), updates)
}

// emitAtLocked sends the editor updates, made from event seq of session s,
// each at its place in the session's log (Positioned); with no seq, as
// messages no event made. s.out must be held.
func (b *bridge) emitAtLocked(s *session, seq uint64, updates []json.RawMessage) {
	for i, u := range updates {
		if seq == 0 {
			b.notify(s.id, u)
			continue
		}
		at := Position{Seq: seq}
		if i < len(updates)-1 {
			at.Part = i + 1
		}
		b.writeAt(s.id, at, u)
	}
}

// closeSessions closes the gateway sessions the bridge created and the
// editor did not close, unless they are to be kept.
func (b *bridge) closeSessions(ctx context.Context) {
	if b.opts.KeepSessions {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	b.mu.Lock()
	var ids []string
	for id, s := range b.sessions {
		if s.created {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := b.closeGatewaySession(ctx, id); err != nil {
				b.log.Warn("closing a session", "session", id, "error", err)
			}
		})
	}
	wg.Wait()
}
