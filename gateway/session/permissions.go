package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// maxAnswered bounds the answered permission requests a session keeps,
// to tell a late answer that the request was answered (rather than that
// there is no such request).
const maxAnswered = 256

type permission struct {
	options  []*acpv2.PermissionOption
	reply    chan *acpv2.PermissionOutcome
	resolved bool
	timedOut bool
	asked    time.Time
	timer    clockwork.Timer
}

func cancelled() *acpv2.PermissionOutcome {
	return &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
}

// Who answered a permission request other than a user
// (PermissionResolved.answered_by).
const (
	AnsweredByAgent   = "agent"   // the agent withdrew it
	AnsweredByTimeout = "timeout" // PermissionTimeout passed
	AnsweredByCancel  = "cancel"  // its turn was cancelled or ended first
	// AnsweredByUser is a user's answer: "user" without authentication,
	// "user:NAME" with it.
	AnsweredByUser = "user"
)

// RequestPermission implements agent.Client.
func (s *Session) RequestPermission(params json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit := s.m.opts.MaxPendingPermissions; limit > 0 && s.pending >= limit {
		if s.refusedPerms++; s.refusedPerms == 1 {
			s.log.Warn("permission request refused: too many are waiting for an answer (further refusals are not logged)", "pending", s.pending, "limit", limit)
		}
		return nil, nil, fmt.Errorf("%d permission requests of this session are waiting for an answer, the gateway's limit (--max-pending-permissions): wait for one to be answered", s.pending)
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
	p := &permission{options: req.GetOptions(), reply: make(chan *acpv2.PermissionOutcome, 1), asked: time.Now()}
	s.perms[id] = p
	s.pending++
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: req}}}, nil); err != nil {
		delete(s.perms, id)
		s.pending--
		return nil, nil, errors.New("the gateway could not store the request")
	}
	p.timer = s.m.opts.Clock.AfterFunc(s.m.opts.PermissionTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.resolved {
			s.log.Info("permission request timed out", "request", id)
			p.timedOut = true
			s.resolveLocked(id, cancelled(), AnsweredByTimeout)
		}
	})
	withdraw := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.resolved {
			s.log.Info("the agent withdrew its permission request", "request", id)
			s.resolveLocked(id, cancelled(), AnsweredByAgent)
		}
	}
	return p.reply, withdraw, nil
}

// outcomeLabel names outcome for the metrics: the chosen option's kind,
// cancelled or timed_out.
func (p *permission) outcomeLabel(outcome *acpv2.PermissionOutcome) string {
	if p.timedOut {
		return "timed_out"
	}
	if id := outcome.GetSelectedOptionId(); id != "" {
		for _, o := range p.options {
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
	p := s.perms[id]
	if p == nil || p.resolved {
		return
	}
	p.resolved = true
	s.pending--
	if p.timer != nil {
		p.timer.Stop()
	}
	s.met.PermissionAnswered(p.outcomeLabel(outcome), time.Since(p.asked))
	// What an answered request keeps: that it was answered, for a while.
	p.options, p.timer = nil, nil
	s.answered = append(s.answered, id)
	if len(s.answered) > maxAnswered {
		delete(s.perms, s.answered[0])
		s.answered = slices.Delete(s.answered, 0, 1)
	}
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionResolved{
		PermissionResolved: &acpv2.PermissionResolved{RequestId: id, Outcome: outcome, AnsweredBy: by}}}}, nil)
	p.reply <- outcome
	close(p.reply)
}

// RespondPermission answers permission request id with optionID, or
// cancels it, as user ("" without authentication).
func (s *Session) RespondPermission(id, optionID string, cancel bool, user string) error {
	// A user's name is prefixed, so that no user named like the other
	// answers (agent, timeout...) passes for them.
	if user == "" {
		user = AnsweredByUser
	} else {
		user = AnsweredByUser + ":" + user
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.perms[id]
	if p == nil {
		return fmt.Errorf("%w %q", ErrNoRequest, id)
	}
	if p.resolved {
		return fmt.Errorf("%w: %s", ErrAlreadyAnswered, id)
	}
	if cancel {
		s.resolveLocked(id, cancelled(), user)
		return nil
	}
	if !slices.ContainsFunc(p.options, func(o *acpv2.PermissionOption) bool { return o.GetOptionId() == optionID }) {
		return fmt.Errorf("%w: option %q is not one the request offers", ErrInvalid, optionID)
	}
	s.resolveLocked(id, &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: optionID}}, user)
	return nil
}
