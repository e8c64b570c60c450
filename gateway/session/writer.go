package session

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// A session's events reach the store from a queue: they are numbered under
// the session's lock and appended by the session's writer, a goroutine
// that runs while the queue holds events, so that no store call is made
// with the lock held and no read (GetSession, Watch, RespondPermission,
// Cancel) waits on one. Watchers get an event once it is stored, in order:
// what a client sees is in the store.
//
// An append that fails is tried again, the queue holding the events, until
// it succeeds or the store has failed for StoreOutageTimeout (an append
// the store refuses as statestore.ErrInvalid, which no retry can mend,
// gives up at once). Meanwhile the
// agent's output is not read once the queue holds StoreBufferBytes (the
// agent then blocks on its pipe), rather than any of it being dropped. At
// the timeout the session gives up: the events not stored are let go
// (numbered, but never shown to anyone), the agent is stopped, the
// watchers' streams end with ErrStoreUnavailable saying from which seq to
// resume, and the session is dropped from memory, to be read again from
// the store, which holds everything any client saw.

// Defaults for the store queue's Options fields left zero.
const (
	DefaultStoreOutageTimeout = 2 * time.Minute
	DefaultStoreBufferBytes   = 16 << 20
)

// ErrStoreUnavailable ends the streams of a session whose events the store
// could not take for StoreOutageTimeout.
var ErrStoreUnavailable = errors.New("the store could not take the session's events")

// maxAppendEvents bounds the events of one append, so that a queue that
// grew during an outage goes to the store in pieces of a bounded size.
const maxAppendEvents = 4096

// Retry pauses between failed appends: doubling from the first to the last.
const (
	firstRetry = 50 * time.Millisecond
	lastRetry  = 2 * time.Second
)

// pending is an entry of the queue: events numbered and not stored yet,
// with the tool calls they changed; or a change of the session's state,
// alone, recorded after the events queued before it. invalid is set when
// one of them does not encode: the store can never take them.
type pending struct {
	events  []*encoded.Event
	changed []statestore.Call
	bytes   int
	invalid error
	state   *stateChange
}

// stateChange is a session state to record in the store.
type stateChange struct {
	state  statestore.State
	detail string
}

// startWriterLocked makes sure the session's writer runs, or will once
// something is queued, and reports false when none can start: the manager
// is closed. s.mu must be held.
func (s *Session) startWriterLocked() bool {
	return s.writing || s.m.addWriter()
}

// enqueueLocked queues p for the writer, and starts it if it is not
// running; startWriterLocked must have said it can. s.mu must be held.
func (s *Session) enqueueLocked(p pending) {
	for _, e := range p.events {
		p.bytes += e.Size()
	}
	s.queue = append(s.queue, p)
	s.unstored += p.bytes
	if !s.writing {
		s.writing = true
		go s.write()
	}
}

// addWriter counts a writer about to start, unless the manager is closed.
func (m *Manager) addWriter() bool {
	m.writersMu.Lock()
	defer m.writersMu.Unlock()
	if m.writersClosed {
		return false
	}
	m.writers.Add(1)
	return true
}

// takeLocked removes from the queue what the next store call stores: a
// state change, or the first entries of events up to the next state
// change and up to maxAppendEvents events (one entry at least), with the
// tool calls they changed as the last of them left each. s.mu must be
// held.
func (s *Session) takeLocked() pending {
	p := s.queue[0]
	n := 1
	if p.state == nil && len(s.queue) > 1 && len(p.events) < maxAppendEvents {
		p = pending{
			events:  append([]*encoded.Event(nil), p.events...),
			changed: append([]statestore.Call(nil), p.changed...),
			bytes:   p.bytes,
			invalid: p.invalid,
		}
		for ; n < len(s.queue) && s.queue[n].state == nil && len(p.events)+len(s.queue[n].events) <= maxAppendEvents; n++ {
			q := s.queue[n]
			p.events = append(p.events, q.events...)
			for _, c := range q.changed {
				p.changed = replaceByID(p.changed, c, storedCallID)
			}
			p.bytes += q.bytes
			p.invalid = cmp.Or(p.invalid, q.invalid)
		}
	}
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	return p
}

// write is the session's writer: it stores the queued entries in order
// until the queue is empty, publishing each batch of events stored to the
// watchers.
func (s *Session) write() {
	defer s.m.writers.Done()
	var (
		p        pending
		have     bool      // p holds what to store
		failures int       // failed store calls of p
		since    time.Time // when the store first failed, with p
	)
	for {
		s.mu.Lock()
		if s.moved || s.storeErr != nil {
			s.dropQueueLocked(p, have)
			s.mu.Unlock()
			return
		}
		if !have {
			if len(s.queue) == 0 {
				s.writing = false
				s.progressLocked()
				s.mu.Unlock()
				return
			}
			p, have = s.takeLocked(), true
			s.inflight = nil
			if len(p.events) > 0 {
				s.inflight = p.events[0]
			}
		}
		s.mu.Unlock()

		err := s.store(p, failures > 0)
		var lost error
		if err != nil {
			lost = s.m.lostData(s, p, err)
		}
		s.mu.Lock()
		if err == nil {
			s.storedLocked(p)
			s.mu.Unlock()
			have, failures, since = false, 0, time.Time{}
			continue
		}
		if lost != nil {
			s.dropQueueLocked(p, true)
			s.mu.Unlock()
			s.lose(lost)
			s.m.writers.Add(1) // this writer is counted still
			go func() {
				defer s.m.writers.Done()
				ctx, cancel := s.m.storeContext()
				defer cancel()
				s.m.checkStore(ctx)
			}()
			return
		}
		if errors.Is(err, statestore.ErrSeqConflict) {
			// Another replica wrote to the log: it took the session over
			// (this one missed its lease renewals). Step aside.
			s.log.Error("store: another replica wrote to the session's log", "error", err)
			s.moved = true
			s.dropQueueLocked(p, true)
			s.mu.Unlock()
			s.m.drop(s)
			return
		}
		failures++
		if since.IsZero() {
			since = time.Now()
		}
		if failures == 1 {
			s.log.Error("store: "+p.what()+"; holding it and trying again", "events", len(p.events), "error", err)
		}
		if errors.Is(err, statestore.ErrInvalid) || time.Since(since) >= s.m.opts.StoreOutageTimeout {
			s.giveUpLocked(p, failures, since, err)
			s.mu.Unlock()
			s.m.abandon(s)
			return
		}
		halt := s.haltLocked()
		s.mu.Unlock()
		pause := time.NewTimer(min(firstRetry<<min(failures-1, 10), lastRetry))
		select {
		case <-pause.C:
		case <-halt: // moved or failed: let go at once
			pause.Stop()
		}
	}
}

// what says what storing p does, for the log.
func (p pending) what() string {
	if p.state != nil {
		return "recording the session state"
	}
	return "appending events"
}

// store stores p: its events, or its state change.
func (s *Session) store(p pending, retry bool) error {
	if p.state == nil {
		return s.append(p, retry)
	}
	ctx, cancel := s.m.storeContext()
	defer cancel()
	return s.m.opts.Store.SetState(ctx, s.rec.ID, p.state.state, p.state.detail)
}

// haltLocked returns a channel closed once the writer is to stop: the
// session moved or its store failed it. s.mu must be held.
func (s *Session) haltLocked() <-chan struct{} {
	if s.halted == nil {
		s.halted = make(chan struct{})
	}
	return s.halted
}

// stopWritingLocked wakes a writer waiting to try the store again, so that
// it sees that it is to stop (s.moved or s.storeErr, set by the caller).
// s.mu must be held.
func (s *Session) stopWritingLocked() {
	halt := s.haltLocked()
	select {
	case <-halt:
	default:
		close(s.halted)
	}
}

// lostData says whether err, p's append's, shows that the store lost the
// session's data: it no longer holds the session, or refused p's first
// seq while its log ends before it (it went back; another replica that
// took the session over would have made it longer). It returns the error
// to end the session with, or nil.
func (m *Manager) lostData(s *Session, p pending, err error) error {
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		return fmt.Errorf("%w: the store no longer holds the session (did Redis restart without its data?): its agent was stopped", ErrDataLost)
	case !errors.Is(err, statestore.ErrSeqConflict):
		return nil
	}
	ctx, cancel := m.storeContext()
	defer cancel()
	took := p.events[0].Seq() - 1
	if rec, rerr := m.opts.Store.GetSession(ctx, s.rec.ID); rerr != nil || rec.LastSeq >= took {
		return nil // moved on: taken over (or unknown: step aside all the same)
	}
	return fmt.Errorf("%w: the store's log of the session no longer reaches seq %d, which it took: its agent was stopped", ErrDataLost, took)
}

// append stores p. After a failed append of the same events (retry), an
// append refused for its seq may have been stored all the same, the
// failure being only the answer's: p is then found in the log.
func (s *Session) append(p pending, retry bool) error {
	if p.invalid != nil {
		return p.invalid
	}
	ctx, cancel := s.m.storeContext()
	defer cancel()
	err := s.m.opts.Store.Append(ctx, s.rec.ID, p.events, p.changed)
	if err == nil || !retry || !errors.Is(err, statestore.ErrSeqConflict) {
		return err
	}
	first := p.events[0].Seq()
	got, rerr := s.m.opts.Store.Events(ctx, s.rec.ID, first-1, len(p.events))
	if rerr != nil {
		return rerr // not known either way: tried again
	}
	if len(got) == len(p.events) && bytes.Equal(got[0].Proto(), p.events[0].Proto()) &&
		bytes.Equal(got[len(got)-1].Proto(), p.events[len(p.events)-1].Proto()) {
		return nil
	}
	return err
}

// firstUnstoredLocked returns the first event numbered and not known to
// be stored: the first of the append under way, or of the queue; nil when
// there is none. s.mu must be held.
func (s *Session) firstUnstoredLocked() *encoded.Event {
	if s.inflight != nil {
		return s.inflight
	}
	for _, q := range s.queue {
		if len(q.events) > 0 {
			return q.events[0]
		}
	}
	return nil
}

// storedLocked hands the events of p, which the store took, to the
// watchers. s.mu must be held.
func (s *Session) storedLocked(p pending) {
	s.inflight = nil
	if p.state != nil {
		s.progressLocked()
		return
	}
	s.stored = p.events[len(p.events)-1].Seq()
	s.unstored -= p.bytes
	s.met.Events(len(p.events))
	if s.live != nil {
		// The same work however many watch: each reads the ring.
		s.live.publish(p.events, s.needLocked)
		if s.live.sweepDue() {
			s.sweepLocked()
		}
	}
	s.progressLocked()
}

// progressLocked wakes whoever waits for the queue to shrink. s.mu must be
// held.
func (s *Session) progressLocked() {
	if s.progress != nil {
		close(s.progress)
		s.progress = nil
	}
}

// dropQueueLocked lets go of the queued events, and of p taken from the
// queue if held: none was shown to anyone. They are counted as not
// stored, and their seqs are numbered again. s.mu must be held.
func (s *Session) dropQueueLocked(p pending, held bool) {
	n := 0
	if held {
		n = len(p.events)
	}
	for _, q := range s.queue {
		n += len(q.events)
	}
	if n > 0 {
		s.m.opts.Metrics.EventsNotStored(n)
		s.log.Warn("store: events let go without being stored", "events", n, "stored_seq", s.stored)
	}
	s.inflight = nil
	clear(s.queue)
	s.queue = nil
	s.unstored = 0
	s.seq = s.stored
	s.writing = false
	s.progressLocked()
}

// giveUpLocked ends the wait for a store that failed for the outage
// timeout, or refused p as ErrInvalid, with p (taken from the queue) not
// stored. s.mu must be held.
func (s *Session) giveUpLocked(p pending, failures int, since time.Time, err error) {
	lost := len(p.events)
	for _, q := range s.queue {
		lost += len(q.events)
	}
	s.stopWritingLocked()
	if errors.Is(err, statestore.ErrInvalid) {
		// Not an outage: the store refused what it can never take.
		s.storeErr = fmt.Errorf("%w: its agent was stopped and %d events after seq %d were not stored", err, lost, s.stored)
	} else {
		s.storeErr = fmt.Errorf("%w for %v: its agent was stopped and %d events after seq %d were not stored; resume with Watch afterSeq=%d once the store is back",
			ErrStoreUnavailable, time.Since(since).Round(time.Second), lost, s.stored, s.stored)
	}
	s.log.Error("store: giving up on the session's events", "failed_appends", failures, "last_error", err, "not_stored", lost, "stored_seq", s.stored)
	s.dropQueueLocked(p, true)
}

// waitRoom returns once the session's events not stored fit in
// StoreBufferBytes, or the session's writer gave up: the agent's reader
// calls it, so that an agent whose output the store cannot take is not
// read (it blocks on its pipe) rather than having its output dropped.
func (s *Session) waitRoom() {
	for {
		s.mu.Lock()
		if s.unstored <= s.m.opts.StoreBufferBytes || s.storeErr != nil || s.moved {
			s.mu.Unlock()
			return
		}
		if s.progress == nil {
			s.progress = make(chan struct{})
		}
		ch := s.progress
		s.mu.Unlock()
		<-ch
	}
}

// flush waits until the queued events are stored or the writer gave up,
// or ctx ends.
func (s *Session) flush(ctx context.Context) error {
	for {
		s.mu.Lock()
		if !s.writing {
			err := s.storeErr
			s.mu.Unlock()
			return err
		}
		if s.progress == nil {
			s.progress = make(chan struct{})
		}
		ch := s.progress
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// releaseFlush bounds the wait, as a session ends, for its events to be
// stored before its watchers' streams end.
func (m *Manager) releaseFlush() time.Duration {
	return min(m.opts.StoreOutageTimeout, 5*time.Second)
}

// abandon lets go of a session whose writer gave up: its agent is stopped,
// its watchers' streams end with the writer's error, and it is read from
// the store when next asked for.
func (m *Manager) abandon(s *Session) {
	s.leave()
	m.mu.Lock()
	closed := m.closed
	if !closed {
		m.upkeep.Add(1)
	}
	m.mu.Unlock()
	if closed {
		return // the next start-up, or another replica, marks it lost
	}
	go m.markAbandoned(s.rec.ID, fmt.Sprintf("%v for %v: the agent was stopped", ErrStoreUnavailable, m.opts.StoreOutageTimeout))
}

// markAbandoned records in the store, once it takes it, that the agent of
// an abandoned session is gone and why, so that it does not show ready.
func (m *Manager) markAbandoned(id, detail string) {
	defer m.upkeep.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ctx, cancel := m.storeContext()
		done := m.markOrphan(ctx, id, detail, "its events could not be stored")
		cancel()
		if done {
			return
		}
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}
