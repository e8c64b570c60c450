package session

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// every runs f every interval, with a context that long, until the
// manager closes: the upkeep of leases and of the store's bytes.
func (m *Manager) every(interval time.Duration, f func(ctx context.Context)) {
	defer m.upkeep.Done()
	tick := m.opts.Clock.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.Chan():
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
		start := m.opts.Clock.Now()
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

// storeFailed notes that a store call failed now: on the fences'
// monotonic clock (monoNow), so that a change of the wall clock neither
// hastens nor holds off a takeover. Never 0, which is "never failed".
func (m *Manager) storeFailed() { m.storeFailedAt.Store(max(m.monoNow(), 1)) }

// storeSteady says whether the store has not failed for LeaseTTL.
func (m *Manager) storeSteady() bool {
	at := m.storeFailedAt.Load()
	return at == 0 || time.Duration(m.monoNow()-at) >= m.opts.LeaseTTL
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
