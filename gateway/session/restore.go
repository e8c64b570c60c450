package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	calls, asOf, err := m.opts.Store.ToolCalls(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	s := newSession(m, rec, m.opts.Agents[rec.Agent])
	s.tools = merge.Restore(calls)
	s.seq, s.stored = asOf, asOf
	s.detail = rec.Detail
	s.agentSessionID = rec.AgentSessionID
	s.resumable = rec.AgentSessionID != ""
	s.version = acpjson.Version(rec.ProtocolVersion)
	return s, nil
}

// Snapshot returns the merged state of user's session id, from this
// gateway's session or from the store.
func (m *Manager) Snapshot(ctx context.Context, user, id string) (*acpv2.SessionSnapshot, error) {
	if s := m.local(id); s != nil {
		if _, err := owned(s, user); err != nil {
			return nil, err
		}
		return s.Snapshot(), nil
	}
	rec, err := m.record(ctx, user, id)
	if err != nil {
		return nil, err
	}
	return storedSnapshot(ctx, m.opts.Store, rec)
}

func storedSnapshot(ctx context.Context, st statestore.Store, rec *statestore.Session) (*acpv2.SessionSnapshot, error) {
	calls, asOf, err := st.ToolCalls(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	return &acpv2.SessionSnapshot{
		SessionId: rec.ID, ToolCalls: calls, Agent: rec.Agent, Cwd: rec.Cwd, LastSeq: asOf,
		CreatedAt: timestamppb.New(rec.CreatedAt), State: string(rec.State), StateDetail: rec.Detail,
		AgentContextLost: agentContextLost(rec),
	}, nil
}

// readEvents reads stored events after seq after. Events dropped by
// retention are replaced by one snapshot event whose seq is the last event
// it reflects, so a reader never silently misses state.
func readEvents(ctx context.Context, st statestore.Store, id string, after uint64, limit int) ([]*encoded.Event, error) {
	events, err := st.Events(ctx, id, after, limit)
	if !errors.Is(err, statestore.ErrTrimmed) {
		return events, err
	}
	rec, err := st.GetSession(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := storedSnapshot(ctx, st, rec)
	if err != nil {
		return nil, err
	}
	ev, err := encoded.New(&acpv2.SessionEvent{Seq: snap.GetLastSeq(), Time: timestamppb.Now(),
		Event: &acpv2.SessionEvent_Snapshot{Snapshot: snap}})
	if err != nil {
		return nil, err
	}
	return []*encoded.Event{ev}, nil
}

// closes says whether ev is the session's state changing to closed.
func closes(ev *encoded.Event) bool {
	if ev.Kind() != encoded.StateChanged {
		return false
	}
	msg, err := ev.Message()
	return err == nil && msg.GetStateChanged().GetState() == string(statestore.StateClosed)
}

// Stream is a source of a session's events in seq order.
type Stream interface {
	// NextBatch fills dst with the next events, at least one, waiting for
	// one if need be, and returns how many it wrote; or why the stream
	// ended, once every event before the end was returned.
	NextBatch(ctx context.Context, dst []*encoded.Event) (int, error)
	// LastSeq is the seq of the last event NextBatch returned.
	LastSeq() uint64
	// Close ends the stream.
	Close()
}

// Watch streams user's session id from afterSeq: live from this gateway's
// session, or followed in the store when another replica runs it (or none
// does), so a watcher keeps its stream when that replica dies.
func (m *Manager) Watch(ctx context.Context, user, id string, afterSeq uint64) (Stream, error) {
	if s := m.local(id); s != nil {
		if _, err := owned(s, user); err != nil {
			return nil, err
		}
		return s.Watch(afterSeq), nil
	}
	if _, err := m.record(ctx, user, id); err != nil {
		return nil, err
	}
	return &follower{st: m.opts.Store, id: id, next: afterSeq + 1}, nil
}

// follower reads a session's events from the store, waiting for new ones.
type follower struct {
	st   statestore.Store
	id   string
	next uint64
	page []*encoded.Event
	done bool
}

func (f *follower) NextBatch(ctx context.Context, dst []*encoded.Event) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for len(f.page) == 0 {
		if f.done {
			return 0, ErrClosed
		}
		events, err := readEvents(ctx, f.st, f.id, f.next-1, replayPage)
		if err != nil {
			return 0, err
		}
		if len(events) > 0 {
			f.page = events
			break
		}
		if err := f.st.WaitEvents(ctx, f.id, f.next-1); err != nil {
			if errors.Is(err, statestore.ErrNotFound) {
				return 0, ErrClosed
			}
			return 0, err
		}
	}
	n := 0
	for n < len(dst) && len(f.page) > 0 {
		ev := f.page[0]
		f.page = f.page[1:]
		dst[n] = ev
		n++
		f.next = ev.Seq() + 1
		if closes(ev) {
			f.done, f.page = true, nil
		}
	}
	return n, nil
}

func (f *follower) LastSeq() uint64 { return f.next - 1 }

func (f *follower) Close() {}

// every runs f every interval, with a context that long, until the
// manager closes: the upkeep of leases and of the store's bytes.
func (m *Manager) every(interval time.Duration, f func(ctx context.Context)) {
	defer m.upkeep.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		f(ctx)
		cancel()
	}
}

// keepLeases renews the leases of the sessions this gateway runs, lets go
// of sessions another replica took, and marks lost the sessions of
// replicas that died.
func (m *Manager) keepLeases(ctx context.Context) {
	// First, before any store call, which may wait: a gateway that was
	// stopped (SIGSTOP) past its sessions' fences freezes their agents now.
	for _, s := range m.running() {
		s.freezeIfDue()
	}
	m.checkStore(ctx)
	m.renewLeases(ctx)
	m.sweepOrphans(ctx)
}

func (m *Manager) renewLeases(ctx context.Context) {
	for _, s := range m.running() {
		s.mu.Lock()
		closed := s.state == statestore.StateClosed
		s.mu.Unlock()
		if closed {
			m.forget(ctx, s)
			continue
		}
		start := time.Now()
		err := m.leaser.AcquireLease(ctx, s.rec.ID, m.opts.Replica, m.opts.LeaseTTL)
		switch {
		case errors.Is(err, statestore.ErrLeaseHeld):
			m.opts.Log.Warn("another replica took the session", "session", s.rec.ID, "error", err)
			m.drop(s)
		case err != nil:
			m.storeFailed()
			m.opts.Log.Error("store: renewing a lease", "session", s.rec.ID, "error", err)
		default:
			m.renewed(ctx, s, start)
		}
	}
}

// drop lets go of a session another replica took over. Its agent is
// killed first, at once: the other replica may be running one by now.
func (m *Manager) drop(s *Session) {
	s.killFenced("another replica took the session over")
	s.evict()
	ctx, cancel := m.storeContext()
	defer cancel()
	m.forget(ctx, s)
}

// A lease that lapsed while the store was out of reach says nothing of
// its holder: it could not renew it, and may be running the session's
// agent still, its events waiting for the store (writer.go). So a replica
// takes a live session over, or marks it lost, only once the store has
// answered it for a whole LeaseTTL since it last failed: by then a holder
// that is alive has renewed its lease (every LeaseTTL/3).

// storeFailed notes that a store call failed now.
func (m *Manager) storeFailed() { m.storeFailedAt.Store(time.Now().UnixNano()) }

// storeSteady says whether the store has not failed for LeaseTTL.
func (m *Manager) storeSteady() bool {
	at := m.storeFailedAt.Load()
	return at == 0 || time.Since(time.Unix(0, at)) >= m.opts.LeaseTTL
}

// storeContext bounds a store call made while a session's lock is held,
// so that one stuck call cannot hold up the lease upkeep of every session.
func (m *Manager) storeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.opts.LeaseTTL/3)
}

// ended lets go of a closed session: it stays in the store (up to the
// store's MaxEndedSessions, which the store's SetState applies) and is
// read from there. It checks MaxStoreBytes unless the last check found
// the store within it.
func (m *Manager) ended(s *Session) {
	ctx, cancel := m.storeContext()
	defer cancel()
	m.letGo(ctx, s)
	if !m.storeWithin.Load() {
		m.pruneEnded(ctx)
	}
}

// letGo drops a session this gateway no longer runs, and its lease if it
// has one.
func (m *Manager) letGo(ctx context.Context, s *Session) {
	if m.leaser != nil {
		m.forget(ctx, s)
	} else {
		m.unregister(s)
	}
}

// forget drops a session this gateway no longer runs and its lease.
func (m *Manager) forget(ctx context.Context, s *Session) {
	m.unregister(s)
	if err := m.leaser.ReleaseLease(ctx, s.rec.ID, m.opts.Replica); err != nil {
		m.opts.Log.Warn("store: releasing a lease", "session", s.rec.ID, "error", err)
	}
}

// sweepOrphans marks lost the live sessions no replica holds a lease on:
// their replica died.
func (m *Manager) sweepOrphans(ctx context.Context) {
	if !m.storeSteady() {
		return
	}
	recs, err := m.opts.Store.ListSessions(ctx, "")
	if err != nil {
		m.storeFailed()
		m.opts.Log.Error("store: listing sessions", "error", err)
		return
	}
	for _, rec := range recs {
		if live(rec.State) {
			m.sweepOrphan(ctx, rec.ID)
		}
	}
}

// sweepOrphan marks session id lost if no replica holds its lease.
func (m *Manager) sweepOrphan(ctx context.Context, id string) {
	m.markOrphan(ctx, id, detailGatewayGone, "its replica stopped renewing its lease")
}

// markOrphan marks session id lost, with detail, if this gateway does not
// run it and no replica holds its lease, and logs why. It runs as a
// restore does (Get), one at a time with them: this replica's leases are
// re-entrant, so a sweep running beside a restore of the same session
// would take the lease too, mark the session lost a second time and then
// release the lease the restore holds. It reports false when the store
// failed, true when the session is marked or needs no marking.
func (m *Manager) markOrphan(ctx context.Context, id, detail, why string) bool {
	m.restoring.Lock()
	defer m.restoring.Unlock()
	if m.local(id) != nil {
		return true
	}
	if m.leaser != nil {
		if err := m.leaser.AcquireLease(ctx, id, m.opts.Replica, m.opts.LeaseTTL); err != nil {
			return errors.Is(err, statestore.ErrLeaseHeld) // held: its replica is alive
		}
		defer func() {
			if err := m.leaser.ReleaseLease(ctx, id, m.opts.Replica); err != nil {
				m.opts.Log.Warn("store: releasing a lease", "session", id, "error", err)
			}
		}()
	}
	fresh, err := m.opts.Store.GetSession(ctx, id)
	if err != nil || !live(fresh.State) {
		return err == nil || errors.Is(err, statestore.ErrNotFound)
	}
	if err := m.settle(ctx, fresh, detail); err != nil {
		m.opts.Log.Error("store: marking a session lost", "session", id, "error", err)
		return false
	}
	m.opts.Log.Info("marked lost: "+why, "session", id)
	return true
}

// storePruneInterval is how often the store's bytes are checked against
// MaxStoreBytes, besides when a session closes while they were over it.
const storePruneInterval = time.Minute

// pruneEnded deletes the closed sessions that closed first, but for the
// last closed, while the store holds more than MaxStoreBytes. It reads
// every record.
func (m *Manager) pruneEnded(ctx context.Context) {
	maxBytes := m.opts.MaxStoreBytes
	if maxBytes <= 0 {
		m.storeWithin.Store(true)
		return
	}
	m.pruning.Lock()
	defer m.pruning.Unlock()
	recs, err := m.opts.Store.ListSessions(ctx, "")
	if err != nil {
		m.opts.Log.Error("store: listing sessions", "error", err)
		return
	}
	var ended []*statestore.Session
	var total int64
	for _, r := range recs {
		total += r.Bytes
		if r.State == statestore.StateClosed {
			ended = append(ended, r)
		}
	}
	// The first closed go first; CreatedAt stands in for records from
	// before StateChangedAt was kept.
	closedAt := func(r *statestore.Session) time.Time {
		if r.StateChangedAt.IsZero() {
			return r.CreatedAt
		}
		return r.StateChangedAt
	}
	slices.SortStableFunc(ended, func(a, b *statestore.Session) int { return closedAt(a).Compare(closedAt(b)) })
	for i, r := range ended {
		if total <= maxBytes || i == len(ended)-1 {
			break
		}
		if err := m.opts.Store.DeleteSession(ctx, r.ID); err != nil {
			m.opts.Log.Error("store: deleting an ended session", "session", r.ID, "error", err)
			continue
		}
		total -= r.Bytes
		if s := m.local(r.ID); s != nil {
			m.unregister(s)
		}
	}
	m.storeWithin.Store(total <= maxBytes)
	if total > maxBytes && time.Since(m.overWarned) > storePruneInterval {
		m.overWarned = time.Now()
		m.opts.Log.Warn("the store holds more than --max-store-bytes in sessions it may not delete (open ones, and the last closed)",
			"bytes", total, "max", maxBytes)
	}
}
