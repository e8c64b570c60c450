package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Session is one live session: its agent, event log, tool calls, watchers
// and pending permission requests. Its methods are safe for concurrent use.
type Session struct {
	m       *Manager
	rec     statestore.Session // immutable identity: ID, Owner, Agent, Cwd, CreatedAt
	command []string
	log     *slog.Logger

	mu             sync.Mutex
	state          statestore.State
	detail         string
	agent          *agent.Agent
	agentSessionID string
	version        acpjson.Version
	tools          *merge.State
	seq            uint64
	subs           map[*Subscription]struct{}
	turn           bool
	perms          map[string]*permission
	nextPerm       int
	idle           *time.Timer
}

type permission struct {
	options  []*acpv2.PermissionOption
	reply    chan *acpv2.PermissionOutcome
	resolved bool
	timer    *time.Timer
}

func newSession(m *Manager, rec *statestore.Session, command []string) *Session {
	return &Session{
		m:       m,
		rec:     *rec,
		command: command,
		log:     m.opts.Log.With("session", rec.ID, "agent", rec.Agent, "user", rec.Owner),
		state:   rec.State,
		tools:   merge.New(),
		subs:    map[*Subscription]struct{}{},
		perms:   map[string]*permission{},
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.rec.ID }

// start spawns the agent, authenticates with authMethod when one is named,
// and creates the agent-side session.
func (s *Session) start(ctx context.Context, authMethod string) error {
	a, err := agent.Start(ctx, s.m.agentConfig(s))
	if err != nil {
		s.setState(statestore.StateAgentLost, err.Error())
		return fmt.Errorf("%w: %v", ErrAgentGone, err)
	}
	fail := func(err error) error {
		a.Close()
		s.setState(statestore.StateAgentLost, err.Error())
		return err
	}
	if authMethod != "" {
		if !slices.Contains(a.AuthMethods(), authMethod) {
			return fail(fmt.Errorf("%w: the agent offers no authentication method %q (it offers %v)", ErrInvalid, authMethod, a.AuthMethods()))
		}
		if err := a.Authenticate(ctx, authMethod); err != nil {
			return fail(fmt.Errorf("%w: authenticate: %v", ErrAgentGone, err))
		}
	}
	agentSID, err := a.NewSession(ctx, s.rec.Cwd)
	if err != nil {
		var rpcErr *agent.RPCError
		if errors.As(err, &rpcErr) && rpcErr.Code == agent.CodeAuthRequired {
			return fail(fmt.Errorf("%w: the agent requires authentication: name one of its methods %v in authMethod", ErrInvalid, a.AuthMethods()))
		}
		return fail(fmt.Errorf("%w: session/new: %v", ErrAgentGone, err))
	}
	s.mu.Lock()
	s.agent, s.agentSessionID, s.version = a, agentSID, a.Version()
	s.mu.Unlock()
	if err := s.m.opts.Store.SetAgentSession(ctx, s.rec.ID, agentSID, int(a.Version())); err != nil {
		s.log.Error("store: recording the agent session", "error", err)
	}
	s.setState(statestore.StateReady, "")
	s.m.wg.Add(1)
	go s.watchAgent(a)
	s.mu.Lock()
	s.touchLocked()
	s.mu.Unlock()
	return nil
}

func (s *Session) setState(state statestore.State, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStateLocked(state, detail)
}

// setStateLocked records the session's state. s.mu must be held.
func (s *Session) setStateLocked(state statestore.State, detail string) {
	s.state, s.detail = state, detail
	if err := s.m.opts.Store.SetState(context.Background(), s.rec.ID, state, detail); err != nil {
		s.log.Error("store: recording the session state", "error", err)
	}
}

// watchAgent records the agent's end and releases what it held: its pipes,
// its file root, and any process it left in its group.
func (s *Session) watchAgent(a *agent.Agent) {
	defer s.m.wg.Done()
	<-a.Done()
	s.mu.Lock()
	s.agentLostLocked(a)
	s.mu.Unlock()
	a.Close()
}

// agentLostLocked records that agent a has ended, if it is still the
// session's agent: no prompt reaches it any more and its pending permission
// requests are cancelled. Both the turn that saw the agent fail and the
// agent's watcher call it, whichever is first. s.mu must be held.
func (s *Session) agentLostLocked(a *agent.Agent) {
	if s.agent != a {
		return
	}
	s.agent = nil
	for id := range s.perms {
		s.resolveLocked(id, cancelled())
	}
	if s.state != statestore.StateClosed {
		s.log.Warn("agent lost", "reason", a.Err())
		s.setStateLocked(statestore.StateAgentLost, a.Err().Error())
	}
}

func cancelled() *acpv2.PermissionOutcome {
	return &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
}

// emitLocked numbers events, stores them with the tool calls they changed,
// and then hands them to the watchers. s.mu must be held.
func (s *Session) emitLocked(events []*acpv2.SessionEvent, changed []*acpv2.ToolCall) error {
	now := timestamppb.Now()
	for i, ev := range events {
		ev.Seq = s.seq + uint64(i) + 1
		ev.Time = now
	}
	if err := s.m.opts.Store.Append(context.Background(), s.rec.ID, events, changed); err != nil {
		s.log.Error("store: appending events", "error", err)
		return err
	}
	s.seq += uint64(len(events))
	for sub := range s.subs {
		sub.publish(events)
	}
	return nil
}

// SessionUpdate implements agent.Client.
func (s *Session) SessionUpdate(_ string, raw json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := acpjson.DecodeUpdate(raw, s.version)
	if err != nil {
		// Keep what the agent sent rather than drop it.
		s.log.Warn("agent sent an update that does not decode", "error", err)
		if u = acpjson.KeepUnknown(raw); u == nil {
			return
		}
	}
	ev := eventOf(u)
	events := []*acpv2.SessionEvent{ev}
	var changed []*acpv2.ToolCall
	var merged *acpv2.ToolCall
	switch {
	case u.GetToolCallUpdate() != nil:
		merged, err = s.tools.ApplyUpdate(u.GetToolCallUpdate())
	case u.GetToolCallContentChunk() != nil:
		merged, err = s.tools.ApplyChunk(u.GetToolCallContentChunk())
	}
	if err != nil {
		s.log.Warn("tool-call update not merged", "error", err)
	}
	if merged != nil {
		changed = []*acpv2.ToolCall{merged}
		events = append(events, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: merged}})
	}
	_ = s.emitLocked(events, changed)
}

// RequestPermission implements agent.Client.
func (s *Session) RequestPermission(params json.RawMessage) (<-chan *acpv2.PermissionOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, err := acpjson.DecodePermissionRequest(params, s.version)
	if err != nil {
		s.log.Warn("agent sent a malformed permission request", "error", err)
		return nil, err
	}
	s.nextPerm++
	id := fmt.Sprintf("perm-%d", s.nextPerm)
	req.RequestId = id
	if req.GetToolCall() != nil {
		// The call it names may not have been reported yet: preview it
		// anyway, without storing.
		if preview, err := s.tools.Preview(req.GetToolCall()); err == nil {
			req.Preview = preview
		}
	}
	p := &permission{options: req.GetOptions(), reply: make(chan *acpv2.PermissionOutcome, 1)}
	s.perms[id] = p
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: req}}}, nil); err != nil {
		delete(s.perms, id)
		return nil, errors.New("the gateway could not store the request")
	}
	p.timer = time.AfterFunc(s.m.opts.PermissionTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.resolved {
			s.log.Info("permission request timed out", "request", id)
			s.resolveLocked(id, cancelled())
		}
	})
	return p.reply, nil
}

// resolveLocked answers permission request id. s.mu must be held.
func (s *Session) resolveLocked(id string, outcome *acpv2.PermissionOutcome) {
	p := s.perms[id]
	if p == nil || p.resolved {
		return
	}
	p.resolved = true
	if p.timer != nil {
		p.timer.Stop()
	}
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionResolved{
		PermissionResolved: &acpv2.PermissionResolved{RequestId: id, Outcome: outcome}}}}, nil)
	p.reply <- outcome
	close(p.reply)
}

// RespondPermission answers permission request id with optionID, or
// cancels it.
func (s *Session) RespondPermission(id, optionID string, cancel bool) error {
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
		s.resolveLocked(id, cancelled())
		return nil
	}
	if !slices.ContainsFunc(p.options, func(o *acpv2.PermissionOption) bool { return o.GetOptionId() == optionID }) {
		return fmt.Errorf("%w: option %q is not one the request offers", ErrInvalid, optionID)
	}
	s.resolveLocked(id, &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: optionID}})
	return nil
}

// Prompt starts a turn and returns a subscription positioned just before
// its turn_started event.
func (s *Session) Prompt(ctx context.Context, prompt []*acpv2.ContentBlock) (*Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == statestore.StateClosed:
		return nil, ErrClosed
	case s.turn:
		return nil, ErrBusy
	case s.agent == nil:
		return nil, fmt.Errorf("%w (%s)", ErrAgentGone, s.detail)
	}
	sub := s.subscribeLocked(s.seq)
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnStarted{
		TurnStarted: &acpv2.TurnStarted{Prompt: prompt}}}}, nil); err != nil {
		s.unsubscribeLocked(sub, err)
		return nil, err
	}
	s.turn = true
	s.stopIdleLocked()
	a, agentSID := s.agent, s.agentSessionID
	s.m.wg.Add(1)
	go s.runTurn(a, agentSID, prompt)
	return sub, nil
}

func (s *Session) runTurn(a *agent.Agent, agentSID string, prompt []*acpv2.ContentBlock) {
	defer s.m.wg.Done()
	reason, err := a.Prompt(context.Background(), agentSID, prompt)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A permission request cannot outlive its turn.
	for id := range s.perms {
		s.resolveLocked(id, cancelled())
	}
	if a.Err() != nil {
		// Record the loss before the turn's end, so that a client reacting
		// to turn_ended finds the agent gone.
		s.agentLostLocked(a)
	}
	ended := &acpv2.TurnEnded{StopReason: reason, Reason: acpjson.StopReason(reason)}
	if err != nil {
		ended = &acpv2.TurnEnded{Error: err.Error()}
		s.log.Warn("turn failed", "error", err)
	}
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: ended}}}, nil)
	s.turn = false
	s.touchLocked()
}

// Cancel cancels the running turn: every pending permission request is
// answered cancelled, as ACP requires, and the agent gets session/cancel.
func (s *Session) Cancel(ctx context.Context) error {
	s.mu.Lock()
	if !s.turn {
		s.mu.Unlock()
		return ErrNoTurn
	}
	for id := range s.perms {
		s.resolveLocked(id, cancelled())
	}
	a, agentSID := s.agent, s.agentSessionID
	s.mu.Unlock()
	if a == nil {
		return nil // the turn is ending with the agent
	}
	return a.Cancel(ctx, agentSID)
}

// Watch returns a subscription to events after afterSeq.
func (s *Session) Watch(afterSeq uint64) *Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subscribeLocked(afterSeq)
	s.stopIdleLocked()
	return sub
}

// Snapshot returns the session's merged state.
func (s *Session) Snapshot() *acpv2.SessionSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &acpv2.SessionSnapshot{
		SessionId: s.rec.ID,
		ToolCalls: s.tools.Snapshot(),
		Agent:     s.rec.Agent,
		Cwd:       s.rec.Cwd,
		LastSeq:   s.seq,
		CreatedAt: timestamppb.New(s.rec.CreatedAt),
	}
}

// Close ends the session and its agent. Watchers' streams end.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.state == statestore.StateClosed {
		s.mu.Unlock()
		return nil
	}
	s.state = statestore.StateClosed
	a := s.agent
	s.stopIdleLocked()
	s.mu.Unlock()
	if a != nil {
		a.Close()
	}
	s.setState(statestore.StateClosed, "closed by the client")
	s.mu.Lock()
	for sub := range s.subs {
		s.unsubscribeLocked(sub, ErrClosed)
	}
	s.mu.Unlock()
	return nil
}

// shutdown ends the agent for a gateway shutdown.
func (s *Session) shutdown() {
	s.mu.Lock()
	a := s.agent
	s.stopIdleLocked()
	s.mu.Unlock()
	if a != nil {
		a.Close()
	}
	s.mu.Lock()
	for sub := range s.subs {
		s.unsubscribeLocked(sub, ErrShutdown)
	}
	s.mu.Unlock()
}

// touchLocked arms the idle timer when nothing uses the agent.
func (s *Session) touchLocked() {
	if s.m.opts.IdleTimeout < 0 || s.turn || len(s.subs) > 0 || s.agent == nil {
		return
	}
	s.stopIdleLocked()
	a := s.agent
	s.idle = time.AfterFunc(s.m.opts.IdleTimeout, func() {
		s.mu.Lock()
		still := s.agent == a && !s.turn && len(s.subs) == 0
		s.mu.Unlock()
		if still {
			s.log.Info("ending idle agent", "idle", s.m.opts.IdleTimeout)
			a.Close()
		}
	})
}

func (s *Session) stopIdleLocked() {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}
