package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
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
			if err := m.markLost(ctx, rec, detailGatewayGone); err != nil {
				return fmt.Errorf("session %s: %w", rec.ID, err)
			}
		}
	}
	return nil
}

func live(st statestore.State) bool {
	return st == statestore.StateStarting || st == statestore.StateReady
}

// markLost records that the agent of a session no gateway runs is gone,
// and why: the event for watchers, then the state.
func (m *Manager) markLost(ctx context.Context, rec *statestore.Session, detail string) error {
	ev := stateEvent(statestore.StateAgentLost, detail)
	ev.Seq, ev.Time = rec.LastSeq+1, timestamppb.Now()
	if err := m.opts.Store.Append(ctx, rec.ID, []*acpv2.SessionEvent{ev}, nil, nil); err != nil {
		return err
	}
	rec.LastSeq, rec.State, rec.Detail = ev.Seq, statestore.StateAgentLost, detail
	return m.opts.Store.SetState(ctx, rec.ID, statestore.StateAgentLost, detail)
}

// restore builds the in-memory session of a stored record. Its agent is
// gone: a session left live is marked lost first.
func (m *Manager) restore(ctx context.Context, rec *statestore.Session) (*Session, error) {
	if live(rec.State) {
		if err := m.markLost(ctx, rec, detailGatewayGone); err != nil {
			return nil, err
		}
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
	}, nil
}

// readEvents reads stored events after seq after. Events dropped by
// retention are replaced by one snapshot event whose seq is the last event
// it reflects, so a reader never silently misses state.
func readEvents(ctx context.Context, st statestore.Store, id string, after uint64, limit int) ([]*acpv2.SessionEvent, error) {
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
	return []*acpv2.SessionEvent{{Seq: snap.GetLastSeq(), Time: timestamppb.Now(),
		Event: &acpv2.SessionEvent_Snapshot{Snapshot: snap}}}, nil
}

// Stream is a source of a session's events in seq order.
type Stream interface {
	// NextBatch fills dst with the next events, at least one, waiting for
	// one if need be, and returns how many it wrote; or why the stream
	// ended, once every event before the end was returned.
	NextBatch(ctx context.Context, dst []Event) (int, error)
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
	page []*acpv2.SessionEvent
	done bool
}

func (f *follower) NextBatch(ctx context.Context, dst []Event) (int, error) {
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
		dst[n] = storedEvent(ev)
		n++
		f.next = ev.GetSeq() + 1
		if ev.GetStateChanged().GetState() == string(statestore.StateClosed) {
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
		err := m.leaser.AcquireLease(ctx, s.rec.ID, m.opts.Replica, m.opts.LeaseTTL)
		if errors.Is(err, statestore.ErrLeaseHeld) {
			m.opts.Log.Warn("another replica took the session", "session", s.rec.ID, "error", err)
			m.drop(s)
		} else if err != nil {
			m.opts.Log.Error("store: renewing a lease", "session", s.rec.ID, "error", err)
		}
	}
}

// drop lets go of a session another replica took over.
func (m *Manager) drop(s *Session) {
	s.evict()
	ctx, cancel := m.storeContext()
	defer cancel()
	m.forget(ctx, s)
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
	recs, err := m.opts.Store.ListSessions(ctx, "")
	if err != nil {
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
	if err := m.markLost(ctx, fresh, detail); err != nil {
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
