package session

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// detailGatewayGone is why a session whose gateway stopped without ending
// it has no agent.
const detailGatewayGone = "the gateway that ran the agent stopped"

// Recover runs once at start-up on a store this gateway alone uses (a bolt
// file): sessions a previous run left starting or ready lost their agent
// with that run, and are recorded so. On a shared store the lease upkeep
// does this for sessions whose replica died.
func (m *Manager) Recover(ctx context.Context) error {
	if m.leaser != nil {
		return nil
	}
	recs, err := m.opts.Store.ListSessions(ctx, "")
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if live(rec.State) {
			if err := m.settle(ctx, rec, detailGatewayGone); err != nil {
				return fmt.Errorf("session %s: %w", rec.ID, err)
			}
		}
	}
	return nil
}

func live(st statestore.State) bool {
	return st == statestore.StateStarting || st == statestore.StateReady
}

// Why a turn ended with the gateway that ran it, as TurnEnded.cause says
// (beside CauseTurnTimeout and CauseCancelTimeout); the stop reason is
// cancelled.
const (
	// CauseGatewayShutdown: the gateway was shut down during the turn, and
	// stopped the agent.
	CauseGatewayShutdown = "gateway_shutdown"
	// CauseGatewayLost: the gateway that ran the turn stopped without
	// ending it (it was killed, crashed, or lost its lease); the gateway
	// that next took up the session recorded the end.
	CauseGatewayLost = "gateway_lost"
)

// detailFreshNext is added to the detail of a lost agent that cannot take
// its side of the session back (with a new agent): what the next prompt
// does.
const detailFreshNext = "; the agent offers neither session/load nor session/resume: the next prompt starts a new agent session, which does not know the earlier turns"

// detailFreshSession is the detail of a re-attach that started a new agent
// session.
const detailFreshSession = "re-attached with a new agent session (session/new): the agent could not take back its earlier one, and does not know the earlier turns"

// keptSessionID is the agent session id to record for a session whose
// agent offers caps: sid when a new agent can take that session back
// (session/resume or session/load), else "", so that a gateway that
// restores the session knows, before any agent starts, that the next one
// starts afresh (SessionSnapshot.agent_context_lost).
func keptSessionID(sid string, caps agent.Capabilities) string {
	if caps.Resume || caps.Load {
		return sid
	}
	return ""
}

// agentContextLost is SessionSnapshot.agent_context_lost for a stored
// record.
func agentContextLost(rec *statestore.Session) bool {
	return rec.State == statestore.StateAgentLost && rec.AgentSessionID == ""
}

// settle records what the gateway that ran a session left undone when it
// stopped: for a session it left live, that its agent is gone, and why
// (detail: the event for watchers, then the state); and for any session
// not closed, the end of a turn left without one. rec is updated to
// match.
func (m *Manager) settle(ctx context.Context, rec *statestore.Session, detail string) error {
	if rec.State == statestore.StateClosed {
		return nil
	}
	var events []*acpv2.SessionEvent
	lost := live(rec.State)
	if lost {
		if rec.AgentSessionID == "" {
			detail += detailFreshNext
		}
		// The loss first, as a turn that sees its agent fail records it:
		// a client reacting to the turn's end finds the agent gone.
		events = append(events, stateEvent(statestore.StateAgentLost, detail))
	}
	open, err := turnLeftOpen(ctx, m.opts.Store, rec)
	if err != nil {
		return err
	}
	if open {
		events = append(events, turnEndedBy(CauseGatewayLost))
		m.opts.Log.Info("ended a turn its gateway left running", "session", rec.ID, "cause", CauseGatewayLost)
	}
	if len(events) == 0 {
		return nil
	}
	now := timestamppb.Now()
	encs := make([]*encoded.Event, len(events))
	for i, ev := range events {
		ev.Seq, ev.Time = rec.LastSeq+uint64(i)+1, now
		if encs[i], err = encoded.New(ev); err != nil {
			return err
		}
	}
	if err := m.opts.Store.Append(ctx, rec.ID, encs, nil); err != nil {
		return err
	}
	rec.LastSeq += uint64(len(events))
	if !lost {
		return nil
	}
	rec.State, rec.Detail = statestore.StateAgentLost, detail
	return m.opts.Store.SetState(ctx, rec.ID, statestore.StateAgentLost, detail)
}

// turnEndedBy is the end of a turn the gateway ended itself, for cause.
func turnEndedBy(cause string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{
		StopReason: "cancelled", Reason: acpjson.StopReason("cancelled"), Cause: cause}}}
}

// How many events turnLeftOpen reads at a time: first few, as a session
// at rest ends its log with its last turn's end or a few events after it;
// then twice as many each time, up to the most.
const (
	turnPageFirst = 16
	turnPageMost  = 1024
)

// turnLeftOpen reports whether the last turn in session rec's log has no
// end. It reads the log back from its end, a page at a time, to the last
// turnStarted or turnEnded: a session at rest finds its last turn's end
// in the first page. When retention dropped the events before those kept
// and these hold neither, a turn longer than what is kept was running.
func turnLeftOpen(ctx context.Context, st statestore.Store, rec *statestore.Session) (bool, error) {
	end, page := rec.LastSeq, uint64(turnPageFirst)
	for end > 0 {
		from := end - min(end, page)
		page = min(2*page, turnPageMost)
		events, err := st.Events(ctx, rec.ID, from, int(end-from))
		trimmed := errors.Is(err, statestore.ErrTrimmed)
		if trimmed {
			events, err = keptUpTo(ctx, st, rec.ID, from, end)
		}
		if err != nil {
			return false, err
		}
		for i := len(events) - 1; i >= 0; i-- {
			switch events[i].Kind() {
			case encoded.TurnEnded:
				return false, nil
			case encoded.TurnStarted:
				return true, nil
			}
		}
		if trimmed {
			return true, nil
		}
		end = from
	}
	return false, nil
}

// keptUpTo returns the events of session id that retention kept from
// after seq from up to seq end, retention having dropped some of them:
// it looks for the first kept one by halving the range.
func keptUpTo(ctx context.Context, st statestore.Store, id string, from, end uint64) ([]*encoded.Event, error) {
	lo, hi := from, end // reading after lo fails, after hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		_, err := st.Events(ctx, id, mid, 1)
		switch {
		case errors.Is(err, statestore.ErrTrimmed):
			lo = mid
		case err != nil:
			return nil, err
		default:
			hi = mid
		}
	}
	if hi == end {
		return nil, nil
	}
	return st.Events(ctx, id, hi, int(end-hi))
}

// restore builds the in-memory session of a stored record. Its agent is
// gone: a session left live is marked lost first, and a turn left running
// is ended.
func (m *Manager) restore(ctx context.Context, rec *statestore.Session) (*Session, error) {
	if err := m.settle(ctx, rec, detailGatewayGone); err != nil {
		return nil, err
	}
	kept, err := readStored(ctx, m.opts.Store, rec)
	if err != nil {
		return nil, err
	}
	s := newSession(m, rec, m.opts.Agents[rec.Agent])
	s.tools = merge.Restore(kept.calls)
	s.seq, s.stored = kept.asOf, kept.asOf
	// Its agent is gone: no turn runs, no request waits (readStored),
	// which the store learns with the next events.
	s.sstate, s.sstateDirty = kept.state, kept.ended
	s.lastTime = kept.updated
	s.detail = rec.Detail
	s.agentSessionID = rec.AgentSessionID
	s.resumable = rec.AgentSessionID != ""
	s.version = acpjson.Version(rec.ProtocolVersion)
	return s, nil
}
