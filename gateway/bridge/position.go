package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/sourcegraph/jsonrpc2"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Position is a place in a session's log as a client has had it: through
// event Seq when Part is 0, else through the first Part messages made from
// event Seq (an event may make several; the last of them has Part 0).
type Position struct {
	Seq  uint64
	Part int
}

// String is the position's SSE event id: "SEQ", or "SEQ.PART".
func (p Position) String() string {
	if p.Part == 0 {
		return strconv.FormatUint(p.Seq, 10)
	}
	return strconv.FormatUint(p.Seq, 10) + "." + strconv.Itoa(p.Part)
}

// Before reports whether p comes before q.
func (p Position) Before(q Position) bool {
	if p.Seq != q.Seq {
		return p.Seq < q.Seq
	}
	return p.Part != 0 && (q.Part == 0 || p.Part < q.Part)
}

// ParsePosition reads the position of an SSE event id: "SEQ" or
// "SEQ.PART", followed by ":N" for a message no event made (the Nth after
// that position), which a new connection does not get again.
func ParsePosition(id string) (Position, error) {
	base, _, _ := strings.Cut(id, ":")
	seq, part, dotted := strings.Cut(base, ".")
	var p Position
	var err error
	if p.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return Position{}, fmt.Errorf("not a session position: %q", id)
	}
	if dotted {
		if p.Part, err = strconv.Atoi(part); err != nil || p.Part <= 0 || p.Seq == 0 {
			return Position{}, fmt.Errorf("not a session position: %q", id)
		}
	}
	return p, nil
}

// Positioned is implemented by [Messages] whose transport numbers each
// session's messages by their place in the session's log, as the /acp
// endpoint's SSE streams do, so that a client can take a session up on
// another connection from where it was.
type Positioned interface {
	// WriteAt sends the client msg, a session/update of session sessionID
	// made from one of its events; having it, the client has the session
	// through at.
	WriteAt(sessionID string, at Position, msg []byte) error
	// Reached says that the client has session sessionID through at,
	// with no message: the bridge attached to it past its history.
	Reached(sessionID string, at Position)
	// Bind gives the transport the bridge's [Resumer], before the bridge
	// reads the first message.
	Bind(r Resumer)
}

// Resumer attaches a connection's bridge to a session from a position,
// for a client that had the session through it, on this connection or
// another.
type Resumer interface {
	// Resume attaches to session sessionID as session/resume does, and
	// sends the client what came after at (the events after it in the
	// log, then those that come), and asks again the permission requests
	// still waiting at at. It fails with [ErrAttached] when the bridge
	// follows the session already, and with a connect error when the
	// session is not the caller's or at is past its log.
	Resume(ctx context.Context, sessionID string, at Position) error
}

// ErrAttached is returned by [Resumer.Resume] for a session the bridge
// follows already.
var ErrAttached = errors.New("bridge: the connection follows this session already")

// writeAt sends the client session/update notification update of session
// id made from an event, at position at; over a transport that is not
// [Positioned], as any other message.
func (b *bridge) writeAt(id string, at Position, update json.RawMessage) {
	msg, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", "session/update", struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}{id, update}})
	if err == nil {
		err = b.stream.writeAt(id, at, msg)
	}
	if err != nil {
		b.log.Debug("session/update not sent", "session", id, "error", err)
	}
}

// Resume implements [Resumer].
func (b *bridge) Resume(ctx context.Context, id string, at Position) error {
	if !b.opts.Follow {
		return errors.New("bridge: Resume needs Options.Follow")
	}
	// The check that the bridge does not have the session and its taking
	// it are one step: of two Resumes (or a Resume and a session/resume)
	// at once, one attaches, and the pending requests are asked once.
	s := b.attach(id)
	if s == nil {
		return ErrAttached
	}
	res, err := b.client.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err == nil && at.Seq > res.Msg.GetSession().GetLastSeq() {
		err = connect.NewError(connect.CodeOutOfRange, fmt.Errorf("position %s is past the session's last event, %d", at, res.Msg.GetSession().GetLastSeq()))
	}
	if err != nil {
		b.forget(s)
		return err
	}
	// The events through `after` are the client's; a partial event is
	// made again, and the transport drops its parts the client had.
	after := at.Seq
	if at.Part > 0 {
		after--
	}
	s.out.Lock()
	pending, err := b.prime(ctx, s, after)
	if err == nil {
		s.lastSeq = max(s.lastSeq, after)
		b.stream.reached(id, at)
	}
	s.out.Unlock()
	if err != nil {
		b.forget(s)
		return err
	}
	s.mu.Lock()
	for _, ev := range pending {
		b.relayLocked(s, ev)
	}
	s.mu.Unlock()
	b.follow(s)
	return nil
}

// prime reads session s's log through event after without sending
// anything, so that s's converter stands where a client that had those
// events stands, and returns the events of the requests (permission
// requests and elicitations) still waiting then, in order. s.out must be
// held.
func (b *bridge) prime(ctx context.Context, s *session, after uint64) ([]*acpv2.SessionEvent, error) {
	if after == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := b.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: s.id}))
	if err != nil {
		cancel()
		return nil, err
	}
	defer func() {
		cancel()
		_ = stream.Close()
	}()
	var order []string
	waiting := map[string]*acpv2.SessionEvent{}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue // heartbeat
		}
		if ev.GetSeq() > after {
			// Retention dropped the events up to after: Watch began
			// with a snapshot past it.
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the session's log no longer holds event %d", after))
		}
		_, _ = s.conv.updates(ev, false)
		switch e := ev.GetEvent().(type) {
		case *acpv2.SessionEvent_PermissionRequest:
			id := e.PermissionRequest.GetRequestId()
			order = append(order, id)
			waiting[id] = ev
		case *acpv2.SessionEvent_ElicitationRequest:
			id := e.ElicitationRequest.GetRequestId()
			order = append(order, id)
			waiting[id] = ev
		case *acpv2.SessionEvent_PermissionResolved:
			delete(waiting, e.PermissionResolved.GetRequestId())
		case *acpv2.SessionEvent_ElicitationResolved:
			delete(waiting, e.ElicitationResolved.GetRequestId())
		}
		if ev.GetSeq() == after {
			var pending []*acpv2.SessionEvent
			for _, id := range order {
				if req := waiting[id]; req != nil {
					pending = append(pending, req)
					delete(waiting, id)
				}
			}
			return pending, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return nil, &jsonrpc2.Error{Code: codeInternal, Message: "acp-gateway Watch ended before the session's log reached the position"}
}

// forget drops session s, which the bridge had only begun to attach.
func (b *bridge) forget(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
}
