package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Prompt starts a turn and returns a subscription positioned just before
// its turn_started event.
//
// A session whose agent was lost gets a new agent first, re-attached to the
// agent's side of the session where the agent allows it.
func (s *Session) Prompt(ctx context.Context, prompt []*acpv2.ContentBlock) (*Subscription, error) {
	if err := s.reattach(ctx); err != nil {
		return nil, err
	}
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
	if err := checkPrompt(s.agent.Profile().Prompt, prompt); err != nil {
		return nil, err
	}
	sub := s.subscribeLocked(s.seq)
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnStarted{
		TurnStarted: &acpv2.TurnStarted{Prompt: prompt}}}}, nil); err != nil {
		s.unsubscribeLocked(sub, err)
		return nil, err
	}
	s.turn, s.turnStart = true, time.Now()
	s.stopReason, s.turnIdle = "", make(chan struct{})
	s.turnSent = make(chan struct{})
	s.turnGen++
	s.turnCause = ""
	s.stopIdleLocked()
	a, agentSID := s.agent, s.agentSessionID
	if d := s.m.opts.TurnTimeout; d > 0 {
		gen := s.turnGen
		s.turnTimers = append(s.turnTimers, time.AfterFunc(d, func() { s.interrupt(gen, CauseTurnTimeout) }))
	}
	s.m.wg.Add(1)
	// The turn outlives the request, but keeps its values: the trace
	// context for the agent, the request id for the logs.
	go s.runTurn(context.WithoutCancel(ctx), a, agentSID, prompt, s.turnIdle, s.turnSent)
	return sub, nil
}

// runTurn runs a prompt turn; idle is closed by the idle state_update that
// ends an ACP v2 turn, and sent once the prompt is written to the agent.
func (s *Session) runTurn(ctx context.Context, a *agent.Agent, agentSID string, prompt []*acpv2.ContentBlock, idle <-chan struct{}, sent chan struct{}) {
	defer s.m.wg.Done()
	markSent := sync.OnceFunc(func() { close(sent) })
	reason, err := a.Prompt(ctx, agentSID, prompt, markSent)
	markSent() // when the prompt could not be written
	if err == nil && a.Version() >= acpjson.V2 {
		select {
		case <-idle:
		case <-a.Done():
			err = a.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turnIdle = nil
	for _, t := range s.turnTimers {
		t.Stop()
	}
	s.turnTimers = nil
	cause := s.turnCause
	// A permission request cannot outlive its turn.
	s.cancelAsksLocked(AnsweredByCancel)
	if a.Err() != nil {
		// Record the loss before the turn's end, so that a client reacting
		// to turn_ended finds the agent gone.
		s.agentLostLocked(a)
	}
	if reason == "" {
		reason = s.stopReason
	}
	if reason == "" {
		reason = "end_turn"
	}
	if cause != "" {
		// The gateway ended the turn: cancelled, whether the agent ended
		// it so or had to be stopped.
		reason, err = "cancelled", nil
		s.log.WarnContext(ctx, "turn ended by the gateway", "cause", cause)
	}
	ended := &acpv2.TurnEnded{StopReason: reason, Reason: acpjson.StopReason(reason), Cause: cause}
	if err != nil {
		ended = &acpv2.TurnEnded{Error: err.Error()}
		s.log.WarnContext(ctx, "turn failed", "error", err)
		reason = "error"
	}
	s.met.TurnEnded(reason, time.Since(s.turnStart))
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: ended}}}, nil)
	s.turn = false
	// The session may now stay idle for long: its tool calls wait in wire
	// form until the next update needs them.
	s.tools.Compact()
	s.calls.Reset()
	s.touchLocked()
}

// Cancel cancels the running turn: every pending permission request is
// answered cancelled, as ACP requires, and the agent gets session/cancel;
// the agent is stopped if the turn still runs Options.CancelGrace later.
// Cancel waits, while ctx allows, until session/cancel is written (or its
// write failed: the agent is ending, and so is the turn), which is at most
// until the agent is stopped.
func (s *Session) Cancel(ctx context.Context) error {
	s.mu.Lock()
	if !s.turn {
		s.mu.Unlock()
		return ErrNoTurn
	}
	written := s.cancelLocked(CauseCancelTimeout)
	s.mu.Unlock()
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelLocked cancels the running turn, as Cancel says, the agent being
// stopped for cause if it does not end the turn within the grace. The
// channel returned is closed once session/cancel is written, or its write
// failed. s.mu must be held, and a turn running.
//
// The grace is armed first, before anything is written to the agent: an
// agent that no longer reads its input blocks the write of session/cancel
// (jsonrpc2 writes one message at a time, honouring no context), or of the
// prompt it waits for, for ever. Stopping the agent closes its input,
// which ends such a write. The writes are done apart from the caller.
func (s *Session) cancelLocked(cause string) <-chan struct{} {
	a, agentSID, sent, gen := s.agent, s.agentSessionID, s.turnSent, s.turnGen
	s.armGraceLocked(gen, cause)
	written := make(chan struct{})
	if a == nil { // the turn is ending with the agent
		s.cancelAsksLocked(AnsweredByCancel)
		close(written)
		return written
	}
	running := func() bool { return s.turn && s.turnGen == gen }
	// The turn's own count keeps the WaitGroup above zero here.
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		defer close(written)
		// session/cancel first, as ACP orders it: an agent that sees its
		// permission request cancelled then knows the turn is being
		// cancelled. It waits for the prompt to be written: a cancel the
		// agent read before the prompt would cancel nothing.
		<-sent
		s.mu.Lock()
		ok := running()
		s.mu.Unlock()
		if !ok {
			return // the turn ended, and its end answered the requests
		}
		if err := a.Cancel(context.Background(), agentSID); err != nil {
			s.log.Warn("sending session/cancel failed", "error", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if running() {
			s.cancelAsksLocked(AnsweredByCancel)
		}
	}()
	return written
}

// Why the gateway ended a turn itself, as TurnEnded.cause says.
const (
	// CauseTurnTimeout: the turn ran longer than Options.TurnTimeout; the
	// agent was sent session/cancel, and stopped if it did not end the
	// turn within Options.CancelGrace.
	CauseTurnTimeout = "turn_timeout"
	// CauseCancelTimeout: the agent did not end its turn within
	// Options.CancelGrace of a Cancel, and was stopped.
	CauseCancelTimeout = "cancel_timeout"
)

// interrupt cancels turn gen, if it still runs, for cause: as Cancel
// does, and with the same grace before the agent is stopped.
func (s *Session) interrupt(gen uint64, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.turn || s.turnGen != gen {
		return
	}
	s.turnCause = cause
	s.cancelLocked(CauseCancelTimeout)
}

// armGraceLocked stops the agent of turn gen if the turn still runs
// CancelGrace from now, for cause (unless a cause was set before). s.mu
// must be held.
func (s *Session) armGraceLocked(gen uint64, cause string) {
	if !s.turn || s.turnGen != gen {
		return
	}
	s.turnTimers = append(s.turnTimers, time.AfterFunc(s.m.opts.CancelGrace, func() {
		s.mu.Lock()
		a := s.agent
		if !s.turn || s.turnGen != gen || a == nil {
			s.mu.Unlock()
			return
		}
		if s.turnCause == "" {
			s.turnCause = cause
		}
		s.mu.Unlock()
		s.log.Warn("the agent did not end its turn after session/cancel: stopping it", "grace", s.m.opts.CancelGrace.String())
		a.Close()
	}))
}
