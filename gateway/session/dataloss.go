package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// A store can lose what it took: a Redis without persistence that
// restarts, a FLUSHALL, an eviction. The gateway notices it three ways:
// the store's Ping (statestore.ErrDataLost, checked with the lease upkeep
// and by /readyz), an append for a session the store no longer holds, and
// an append refused for its seq while this gateway still holds the
// session's lease (the log went back). The sessions concerned are let go:
// their agents stopped, their streams ended with ErrDataLost, and their
// owners told so (data_loss, not not_found) when they ask for them again.

// ErrDataLost ends the streams of a session whose data the store lost, and
// answers its owner's requests for it afterwards.
var ErrDataLost = errors.New("the store lost this session's data")

// maxLost bounds the sessions lost with their store that are remembered,
// to tell their owners.
const maxLost = 10000

// lostSession is what is remembered of a session lost with its store.
type lostSession struct {
	owner string
	err   error
}

// checkStore asks the store whether it still holds what it took, and lets
// go of every session when it does not.
func (m *Manager) checkStore(ctx context.Context) {
	if m.pinger == nil {
		return
	}
	// One check at a time: one that pinged before another trusted the
	// store again would let go of sessions made since, in the new store.
	m.checking.Lock()
	defer m.checking.Unlock()
	err := m.pinger.Ping(ctx)
	if err != nil {
		m.storeFailed()
	}
	if !errors.Is(err, statestore.ErrDataLost) {
		return
	}
	m.opts.Log.Error("store: it lost its data; stopping every session's agent", "error", err)
	m.opts.Metrics.StoreDataLost()
	lostErr := fmt.Errorf("%w (did Redis restart without its data?): its agent was stopped", ErrDataLost)
	all := m.running()
	// Marked at once, so that nothing more is written for them, then
	// trusted again, then let go: stopping agents takes its time.
	for _, s := range all {
		s.markLost(lostErr)
	}
	actx, cancel := m.storeContext()
	defer cancel()
	if err := m.pinger.AcceptLoss(actx); err != nil {
		m.opts.Log.Error("store: trusting it again after a loss", "error", err)
	}
	for _, s := range all {
		s.leave()
	}
}

// lose lets go of s, whose data the store lost, with err.
func (s *Session) lose(err error) {
	s.markLost(err)
	s.leave()
}

// markLost records that the store lost s's data, with err: nothing more
// is written for it, and its owner is told so from now on.
func (s *Session) markLost(err error) {
	s.mu.Lock()
	if s.storeErr == nil {
		s.storeErr = err
		s.log.Error("store: the session's data is lost", "error", err, "stored_seq", s.stored)
	}
	s.stopWritingLocked()
	s.dropQueueLocked(pending{}, false)
	s.mu.Unlock()
	s.m.remember(s, err)
}

// leave stops the agent of s, whose store failed it (storeErr), ends its
// streams with that error and lets go of it.
func (s *Session) leave() {
	s.mu.Lock()
	err := s.storeErr
	s.mu.Unlock()
	s.release(err)
	ctx, cancel := s.m.storeContext()
	defer cancel()
	s.m.letGo(ctx, s)
}

// remember keeps that s was lost with err, for its owner's next requests.
func (m *Manager) remember(s *Session, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lost == nil {
		m.lost = map[string]lostSession{}
	}
	if len(m.lost) >= maxLost {
		for id := range m.lost { // any one
			delete(m.lost, id)
			break
		}
	}
	m.lost[s.rec.ID] = lostSession{owner: s.rec.Owner, err: err}
}

// lostErr is the error of user's session id if it was lost with the store.
func (m *Manager) lostErr(user, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.lost[id]; ok && l.owner == user {
		return l.err
	}
	return nil
}
