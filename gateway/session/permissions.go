package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// maxAnswered bounds the answered requests (permission requests and
// elicitations) a session keeps, to tell a late answer that the request
// was answered (rather than that there is no such request).
const maxAnswered = 256

// ask is a request of the agent's that waits for a client's answer: a
// permission request or an elicitation. Both follow the same rules: the
// first answer wins, PermissionTimeout answers it cancelled, so do the end
// of its turn and the loss of its agent, and the agent may withdraw it.
type ask struct {
	resolved bool
	timedOut bool
	asked    time.Time
	timer    *time.Timer
	// seq is its event's.
	seq uint64
	// A permission request's options, and where its outcome goes.
	options []*acpv2.PermissionOption
	reply   chan *acpv2.PermissionOutcome
	// toolCall is a permission request's tool-call patch, merged into
	// the call's missing fields once the request is answered
	// (askedCallUpdate).
	toolCall *acpv2.ToolCallUpdate
	// An elicitation as relayed (nil for a permission request), and
	// where its answer goes.
	elicit *acpv2.ElicitationRequest
	answer chan *acpv2.ElicitationResolved
}

func cancelled() *acpv2.PermissionOutcome {
	return &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
}

// Who answered a permission request or an elicitation other than a user
// (PermissionResolved.answered_by, ElicitationResolved.answered_by).
const (
	AnsweredByAgent   = "agent"   // the agent withdrew it
	AnsweredByTimeout = "timeout" // PermissionTimeout passed
	AnsweredByCancel  = "cancel"  // its turn was cancelled or ended first
	// AnsweredByUser is a user's answer: "user" without authentication,
	// "user:NAME" with it.
	AnsweredByUser = "user"
)

// answeredBy is how user ("" without authentication) is recorded as
// having answered: prefixed, so that no user named like the other answers
// (agent, timeout...) passes for them.
func answeredBy(user string) string {
	if user == "" {
		return AnsweredByUser
	}
	return AnsweredByUser + ":" + user
}

// RequestPermission implements agent.Client.
func (s *Session) RequestPermission(params json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.roomLocked("permission request"); err != nil {
		return nil, nil, err
	}
	req, err := acpjson.DecodePermissionRequest(params, s.version)
	if err != nil {
		s.log.Warn("agent sent a malformed permission request", "error", err)
		return nil, nil, err
	}
	// Named after the seq of its event: unique in the session for good,
	// across restarts and replicas.
	id := fmt.Sprintf("perm-%d", s.seq+1)
	req.RequestId = id
	if req.GetToolCall() != nil {
		// The call it names may not have been reported yet: preview it
		// anyway, without storing.
		if preview, err := s.tools.Preview(req.GetToolCall()); err == nil {
			req.Preview = preview
		}
	}
	p := &ask{options: req.GetOptions(), toolCall: req.GetToolCall(), reply: make(chan *acpv2.PermissionOutcome, 1)}
	withdraw, err := s.openLocked(id, p, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: req}})
	if err != nil {
		return nil, nil, err
	}
	return p.reply, withdraw, nil
}

// roomLocked refuses a new request of the agent's when
// MaxPendingPermissions of the session's wait for an answer. what names
// the request for the log. s.mu must be held.
func (s *Session) roomLocked(what string) error {
	if limit := s.m.opts.MaxPendingPermissions; limit > 0 && s.pending >= limit {
		if s.refusedPerms++; s.refusedPerms == 1 {
			s.log.Warn(what+" refused: too many are waiting for an answer (further refusals are not logged)", "pending", s.pending, "limit", limit)
		}
		return fmt.Errorf("%d permission requests and elicitations of this session are waiting for an answer, the gateway's limit (--max-pending-permissions): wait for one to be answered", s.pending)
	}
	return nil
}

// openLocked records request a as id, stores its event ev, and arms its
// timeout; it returns the function that withdraws it for the agent.
// s.mu must be held.
func (s *Session) openLocked(id string, a *ask, ev *acpv2.SessionEvent) (func(), error) {
	a.asked, a.seq = time.Now(), s.seq+1
	s.asks[id] = a
	s.pending++
	if err := s.emitLocked([]*acpv2.SessionEvent{ev}, nil); err != nil {
		delete(s.asks, id)
		s.pending--
		return nil, errors.New("the gateway could not store the request")
	}
	a.timer = time.AfterFunc(s.m.opts.PermissionTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !a.resolved {
			s.log.Info("request timed out", "request", id)
			a.timedOut = true
			s.cancelAskLocked(id, AnsweredByTimeout)
		}
	})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !a.resolved {
			s.log.Info("the agent withdrew its request", "request", id)
			s.cancelAskLocked(id, AnsweredByAgent)
		}
	}, nil
}

// cancelAsksLocked cancels every request of the agent's still waiting,
// as by (AnsweredByCancel when their turn or agent ends). s.mu must be
// held.
func (s *Session) cancelAsksLocked(by string) {
	for id := range s.asks {
		s.cancelAskLocked(id, by)
	}
}

// cancelAskLocked answers request id cancelled, as by. s.mu must be held.
func (s *Session) cancelAskLocked(id, by string) {
	a := s.asks[id]
	switch {
	case a == nil || a.resolved:
	case a.elicit != nil:
		s.resolveElicitationLocked(id, &acpv2.ElicitationResolved{Action: acpjson.ElicitCancel}, by)
	default:
		s.resolveLocked(id, cancelled(), by)
	}
}

// closeAskLocked marks request id answered: it keeps only that it was,
// for a while. It returns the request, or nil when there is no such
// request waiting. s.mu must be held.
func (s *Session) closeAskLocked(id string) *ask {
	a := s.asks[id]
	if a == nil || a.resolved {
		return nil
	}
	a.resolved = true
	s.pending--
	if a.timer != nil {
		a.timer.Stop()
	}
	s.answered = append(s.answered, id)
	if len(s.answered) > maxAnswered {
		delete(s.asks, s.answered[0])
		s.answered = slices.Delete(s.answered, 0, 1)
	}
	return a
}

// outcomeLabel names outcome for the metrics: the chosen option's kind,
// cancelled or timed_out.
func (a *ask) outcomeLabel(outcome *acpv2.PermissionOutcome) string {
	if a.timedOut {
		return "timed_out"
	}
	if id := outcome.GetSelectedOptionId(); id != "" {
		for _, o := range a.options {
			if o.GetOptionId() == id {
				return o.GetKind()
			}
		}
	}
	return "cancelled"
}

// resolveLocked answers permission request id with outcome, as by (a
// user, or AnsweredByAgent...). s.mu must be held.
func (s *Session) resolveLocked(id string, outcome *acpv2.PermissionOutcome, by string) {
	p := s.closeAskLocked(id)
	if p == nil {
		return
	}
	s.met.PermissionAnswered(p.outcomeLabel(outcome), time.Since(p.asked))
	asked := p.toolCall
	// What an answered request keeps: that it was answered, for a while.
	p.options, p.timer, p.toolCall = nil, nil, nil
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionResolved{
		PermissionResolved: &acpv2.PermissionResolved{RequestId: id, Outcome: outcome, AnsweredBy: by}}}}, nil)
	if u := askedCallUpdate(s.tools.Get(asked.GetToolCallId()), asked); u != nil {
		// Before the agent hears the outcome, and so before its own
		// updates that follow it.
		s.mergeLocked([]agent.Update{{Update: &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: u}}}}, false)
	}
	p.reply <- outcome
	close(p.reply)
}

// findAskLocked returns the request id waiting for an answer, which is an
// elicitation when elicit is set, else a permission request. s.mu must
// be held.
func (s *Session) findAskLocked(id string, elicit bool) (*ask, error) {
	what := "permission request"
	if elicit {
		what = "elicitation"
	}
	a := s.asks[id]
	if a == nil || (a.elicit != nil) != elicit {
		return nil, fmt.Errorf("%w: no %s %q", ErrNoRequest, what, id)
	}
	if a.resolved {
		return nil, fmt.Errorf("%w: %s %s", ErrAlreadyAnswered, what, id)
	}
	return a, nil
}

// RespondPermission answers permission request id with optionID, or
// cancels it, as user ("" without authentication).
func (s *Session) RespondPermission(id, optionID string, cancel bool, user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.findAskLocked(id, false)
	if err != nil {
		return err
	}
	if cancel {
		s.resolveLocked(id, cancelled(), answeredBy(user))
		return nil
	}
	if !slices.ContainsFunc(p.options, func(o *acpv2.PermissionOption) bool { return o.GetOptionId() == optionID }) {
		return fmt.Errorf("%w: option %q is not one the request offers", ErrInvalid, optionID)
	}
	s.resolveLocked(id, &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: optionID}}, answeredBy(user))
	return nil
}

// askedCallUpdate returns the update that makes an answered permission
// request's tool call (asked, its patch) part of the session's calls,
// stored the call's current state (nil for a call never reported): the
// whole patch for a call the agent never reported (some agents put a
// call's title and input only in the request), else the patch's fields
// that the call lacks (its title, kind, locations, rawInput and content
// when empty), so that a request never overwrites what the agent
// reported. Nil when there is nothing to add.
func askedCallUpdate(stored *acpv2.ToolCall, asked *acpv2.ToolCallUpdate) *acpv2.ToolCallUpdate {
	if asked.GetToolCallId() == "" {
		return nil
	}
	if stored == nil {
		return asked
	}
	u := &acpv2.ToolCallUpdate{ToolCallId: asked.GetToolCallId()}
	set := false
	if stored.GetTitle() == "" && asked.GetTitle().GetValue() != "" {
		u.Title, set = asked.GetTitle(), true
	}
	if stored.GetKind() == "" && asked.GetKind().GetValue() != "" {
		u.Kind, set = asked.GetKind(), true
	}
	if len(stored.GetLocations()) == 0 && len(asked.GetLocations().GetValue().GetItems()) > 0 {
		u.Locations, set = asked.GetLocations(), true
	}
	if stored.GetRawInput() == nil && asked.GetRawInput().GetValue() != nil {
		u.RawInput, set = asked.GetRawInput(), true
	}
	if len(stored.GetContent()) == 0 && len(asked.GetContent().GetValue().GetItems()) > 0 {
		u.Content, set = asked.GetContent(), true
	}
	if !set {
		return nil
	}
	return u
}
