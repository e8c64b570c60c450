package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// attachMode says which agent session attach gives the session.
type attachMode int

const (
	// attachNew makes a new agent session (session/new).
	attachNew attachMode = iota
	// attachAgain takes the agent session back after the agent was lost.
	attachAgain
	// attachAdopt takes an agent session the agent had before the
	// gateway session, recording the history the agent replays (adopt.go).
	attachAdopt
)

// attach spawns the agent and authenticates with authMethod when one is
// named. A new session gets session/new; a re-attach (after the agent was
// lost) gets session/resume or session/load with the agent's session id,
// whichever the agent offers, and when it offers neither (or its session
// id was not kept), session/new: a new agent session that does not know
// the earlier turns, which the state's detail says. An adoption takes the
// agent's session id as adopt.go says.
func (s *Session) attach(ctx context.Context, authMethod string, mode attachMode) error {
	reattach := mode == attachAgain
	started := time.Now()
	cfg, err := s.m.agentConfig(s)
	var a *agent.Agent
	if err == nil {
		a, err = agent.Start(ctx, cfg)
	}
	if err != nil {
		s.met.AgentExited("start_failed")
		// The state's detail, which the store keeps, without the stderr.
		s.setState(statestore.StateAgentLost, err.Error())
		if errors.Is(err, ErrPermission) {
			return err // its working directory is no longer the one checked
		}
		return startFailed(err)
	}
	s.met.AgentStarted(time.Since(started))
	fail := func(err error) error {
		a.Close()
		s.met.AgentExited(a.Reason())
		s.setState(statestore.StateAgentLost, err.Error())
		return err
	}
	if err := a.CheckMCP(cfg.MCPServers); err != nil {
		if reattach {
			return fail(fmt.Errorf("%w: %v", ErrCannotReattach, err))
		}
		return fail(fmt.Errorf("%w: %v", ErrInvalid, err))
	}
	if authMethod != "" {
		if err := authenticate(ctx, a, authMethod); err != nil {
			return fail(err)
		}
	}
	authErr := authRequired
	s.mu.Lock()
	agentSID := s.agentSessionID
	s.mu.Unlock()
	var how string
	var setup agent.SessionSetup
	caps := a.Capabilities()
	switch {
	case mode == attachAdopt:
		if how, setup, err = s.adopt(ctx, a, agentSID); err != nil {
			return fail(err)
		}
	case !reattach || agentSID == "" || !caps.Resume && !caps.Load:
		if reattach {
			how = detailFreshSession
		}
		agentSID, setup, err = a.NewSessionSetup(ctx, s.rec.Cwd)
		if authErr(err) && reattach {
			return fail(fmt.Errorf("%w: the agent requires authentication to start a new session", ErrCannotReattach))
		}
		if authErr(err) {
			return fail(fmt.Errorf("%w: the agent requires authentication: name one of its methods %v in authMethod", ErrInvalid, a.AuthMethodIDs()))
		}
		if err != nil {
			// What the agent said, where it answered: not a lost agent.
			// One that ended instead tells why on its stderr.
			if !errors.Is(err, agent.ErrExited) {
				return fail(agentCallErr("session/new", err))
			}
			return withStderr(fail(fmt.Errorf("%w: session/new: %v", ErrAgentStart, err)), a.StderrTail())
		}
	case caps.Resume:
		how = "re-attached with session/resume"
		setup, err = a.Resume(ctx, agentSID, s.rec.Cwd)
	default:
		how = "re-attached with session/load"
		// The agent replays the conversation, which the log holds already.
		s.mu.Lock()
		s.loading = true
		s.mu.Unlock()
		setup, err = a.Load(ctx, agentSID, s.rec.Cwd)
		s.mu.Lock()
		s.loading = false
		s.mu.Unlock()
	}
	if err != nil {
		if authErr(err) {
			return fail(fmt.Errorf("%w: the agent requires authentication to re-attach", ErrCannotReattach))
		}
		return fail(fmt.Errorf("%w: %s: %v", ErrAgentGone, how, err))
	}
	s.mu.Lock()
	if s.state == statestore.StateClosed {
		s.mu.Unlock()
		a.Close()
		s.met.AgentExited(a.Reason())
		return ErrClosed
	}
	s.agent, s.agentSessionID, s.version, s.authMethod = a, agentSID, a.Version(), authMethod
	s.resumable = caps.Resume || caps.Load
	// Stored with the next events (a re-attach's ready event below).
	if s.sstate.Seed(setup.Modes, setup.ConfigOptions) {
		s.sstateDirty = true
	}
	s.mu.Unlock()
	if err := s.m.opts.Store.SetAgentSession(ctx, s.rec.ID, keptSessionID(agentSID, caps), int(a.Version())); err != nil {
		s.log.ErrorContext(ctx, "store: recording the agent session", "error", err)
	}
	s.mu.Lock()
	s.setStateLocked(statestore.StateReady, how)
	if mode != attachNew {
		s.log.InfoContext(ctx, "agent "+how)
		_ = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateReady, how)}, nil)
	}
	s.touchLocked()
	s.mu.Unlock()
	s.m.wg.Add(1)
	a.OnDone(func() { s.watchAgent(a) })
	return nil
}

// reattach starts a new agent for a session whose agent was lost. Only one
// request re-attaches at a time; the others are told to retry.
func (s *Session) reattach(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.state == statestore.StateClosed:
		s.mu.Unlock()
		return ErrClosed
	case s.agent != nil:
		s.mu.Unlock()
		return nil
	case s.attaching:
		s.mu.Unlock()
		return fmt.Errorf("%w: it is being re-attached; retry", ErrAgentGone)
	case s.moved:
		s.mu.Unlock()
		return ErrMoved
	case len(s.command) == 0:
		s.mu.Unlock()
		return fmt.Errorf("%w: agent %q is not configured on this gateway", ErrCannotReattach, s.rec.Agent)
	case s.fenced():
		s.mu.Unlock()
		return ErrStoreRecovering // no new agent while the lease may lapse
	}
	s.attaching = true
	authMethod := s.authMethod
	s.mu.Unlock()
	err := s.attach(ctx, authMethod, attachAgain)
	s.mu.Lock()
	s.attaching = false
	s.mu.Unlock()
	return err
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
// session's agent: no prompt reaches it any more, its pending permission
// requests are cancelled, and its exit is counted. The turn that saw the
// agent fail, the agent's watcher and endAgent call it, whichever is
// first. s.mu must be held.
func (s *Session) agentLostLocked(a *agent.Agent) {
	if s.agent != a {
		return
	}
	s.agent = nil
	// a.Err, which the turn checks, is set just before Done is closed.
	<-a.Done()
	s.met.AgentExited(a.Reason())
	s.cancelAsksLocked(AnsweredByCancel)
	if s.state != statestore.StateClosed && !s.moved {
		s.log.Warn("agent lost", "reason", a.Err())
		detail := a.Err().Error()
		if !s.resumable {
			detail += detailFreshNext
		}
		s.setStateLocked(statestore.StateAgentLost, detail)
		_ = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateAgentLost, detail)}, nil)
	}
}

// endAgent ends the session's agent, if it has one, and records its end
// before it returns, rather than when the agent's watcher gets to it.
func (s *Session) endAgent() {
	s.mu.Lock()
	a := s.agent
	s.stopIdleLocked()
	s.mu.Unlock()
	if a == nil {
		return
	}
	a.Close()
	s.mu.Lock()
	s.agentLostLocked(a)
	s.mu.Unlock()
}

// touchLocked arms the idle timer when nothing uses the agent.
func (s *Session) touchLocked() {
	if s.m.opts.IdleTimeout < 0 || s.turn || len(s.subs) > 0 || s.agent == nil {
		return
	}
	s.stopIdleLocked()
	a := s.agent
	s.idle = s.m.opts.Clock.AfterFunc(s.m.opts.IdleTimeout, func() {
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

// liveAgent returns the session's agent, re-attaching a lost one first.
func (s *Session) liveAgent(ctx context.Context) (*agent.Agent, string, error) {
	if err := s.reattach(ctx); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == nil {
		return nil, "", fmt.Errorf("%w (%s)", ErrAgentGone, s.detail)
	}
	return s.agent, s.agentSessionID, nil
}

// startFailed is the error of an agent that did not start: what went
// wrong and, when it wrote any, the last lines of its stderr, which
// usually say why (a missing module, a bad flag, a missing key). Only the
// session's own user gets it: the agent ran for their session.
func startFailed(err error) error {
	var se *agent.StartError
	if !errors.As(err, &se) {
		se = &agent.StartError{}
	}
	return withStderr(fmt.Errorf("%w: %v", ErrAgentStart, err), se.Stderr)
}

// withStderr adds to err the last lines of the agent's stderr, tail,
// when it wrote any: after the state's detail is set from err, which the
// store keeps, so that the stderr goes only to the session's user.
func withStderr(err error, tail string) error {
	if tail == "" {
		return err
	}
	return fmt.Errorf("%w; the last lines of its stderr:\n%s", err, tail)
}

// authRequired says whether err is the agent's refusal to work before
// authentication.
func authRequired(err error) bool {
	var rpcErr *agent.RPCError
	return errors.As(err, &rpcErr) && rpcErr.Code == agent.CodeAuthRequired
}

// agentCallErr maps an agent's answer to a session error.
func agentCallErr(method string, err error) error {
	var rpcErr *agent.RPCError
	switch {
	case errors.Is(err, agent.ErrUnsupported):
		return fmt.Errorf("%w: the agent's ACP version has no %s", ErrUnsupported, method)
	case errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc2.CodeMethodNotFound:
		return fmt.Errorf("%w: the agent does not implement %s", ErrUnsupported, method)
	case errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc2.CodeInvalidParams:
		return fmt.Errorf("%w: the agent refused the %s arguments: %s", ErrInvalid, method, rpcErr.Message)
	case errors.As(err, &rpcErr):
		return fmt.Errorf("%w: %s", ErrAgentRefused, rpcErr.Message)
	}
	return fmt.Errorf("%w: %s: %v", ErrAgentGone, method, err)
}

// SetMode switches the agent's session mode (ACP v1 session/set_mode). The
// agent reports the switch with a current_mode_update.
func (s *Session) SetMode(ctx context.Context, modeID string) error {
	a, sid, err := s.liveAgent(ctx)
	if err != nil {
		return err
	}
	if err := a.SetMode(ctx, sid, modeID); err != nil {
		return agentCallErr("session/set_mode", err)
	}
	return nil
}

// SetConfigOption sets configID to value (a string value id or a bool) and
// returns every option with its value. The options are also recorded as a
// config_option_update event, so watchers see the change.
func (s *Session) SetConfigOption(ctx context.Context, configID string, value any) ([]*acpv2.SessionConfigOption, error) {
	a, sid, err := s.liveAgent(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := a.SetConfigOption(ctx, sid, configID, value)
	if err != nil {
		return nil, agentCallErr("session/set_config_option", err)
	}
	update := &acpv2.ConfigOptionUpdate{}
	if len(raw) > 0 {
		if err := acpjson.Decode([]byte(`{"configOptions":`+string(raw)+`}`), update, a.Version()); err != nil {
			return nil, fmt.Errorf("%w: the agent answered session/set_config_option with options that do not decode: %v", ErrAgentRefused, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_ConfigOptionUpdate{ConfigOptionUpdate: update}}}, nil); err != nil {
		return nil, err
	}
	return update.GetConfigOptions(), nil
}
