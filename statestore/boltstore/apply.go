package boltstore

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// appliedGen is the gen of the last logged Append that tx's file holds.
func appliedGen(tx *bolt.Tx) uint64 {
	if v := tx.Bucket(bucketMeta).Get(keyApplied); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// replay applies to the file what the log's segments hold past what it
// holds (an Append logged before a crash, or before a checkpoint that
// failed), removes them, and returns the number of the segment to write
// next and the gen of the last entry.
func (s *Store) replay() (seg, gen uint64, err error) {
	segs, err := segments(s.path)
	if err != nil {
		return 0, 0, fmt.Errorf("list write-ahead log segments: %w", err)
	}
	if len(segs) == 0 {
		err = s.db.View(func(tx *bolt.Tx) error { gen = appliedGen(tx); return nil })
		return 1, gen, err
	}
	entries, err := readSegments(s.path, segs)
	if err != nil {
		return 0, 0, err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		gen = appliedGen(tx)
		var unapplied []*entry
		for _, e := range entries {
			if e.gen > gen {
				unapplied = append(unapplied, e)
			}
		}
		if len(unapplied) > 0 {
			gen = unapplied[len(unapplied)-1].gen
		}
		if err := s.applyEntries(tx, unapplied); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyApplied, u64(gen))
	})
	if err != nil {
		return 0, 0, fmt.Errorf("apply the write-ahead log: %w", err)
	}
	last := segs[len(segs)-1]
	if err := removeSegments(s.path, last+1); err != nil {
		return 0, 0, fmt.Errorf("remove applied write-ahead log segments: %w", err)
	}
	return last + 1, gen, nil
}

// applyEntries writes logged Appends to the file, in log order: each
// session's record is read and written once, and its events and calls
// are put together. An entry of a session deleted since (or of an
// earlier incarnation of its id) is dropped, as are events the file
// holds already. So are the entries of a session the file holds
// corrupt (its record unreadable, its logs missing, its seqs not
// following): its reads fail already, and one such session must not
// stop every other's from reaching the file, nor the file from opening.
func (s *Store) applyEntries(tx *bolt.Tx, entries []*entry) error {
	type staged struct {
		r      *record // nil: the session is gone
		last   uint64  // the seq of the last event staged or in the file
		events []keyed
		calls  []keyed
	}
	sessions := map[string]*staged{}
	var order []*staged
	for _, e := range entries {
		st := sessions[e.id]
		if st == nil {
			st = &staged{}
			if r, err := getRecord(tx, e.id); err == nil && logsHeld(tx, e.id) {
				st.r, st.last = r, r.LastSeq
				order = append(order, st)
			}
			sessions[e.id] = st
		}
		if st.r == nil || st.r.Order != e.order {
			continue
		}
		events := e.events
		for len(events) > 0 && events[0].Seq() <= st.last {
			events = events[1:]
		}
		if statestore.CheckSeqs(st.last, events) != nil {
			st.r = nil // the file and the log disagree: see above
			continue
		}
		for _, ev := range events {
			st.events = append(st.events, keyed{u64(ev.Seq()), ev.Proto()})
			st.last = ev.Seq()
		}
		for _, c := range e.calls {
			st.calls = append(st.calls, keyed{[]byte(c.ID), c.Proto})
		}
	}
	for _, st := range order {
		if st.r == nil || len(st.events) == 0 && len(st.calls) == 0 {
			continue
		}
		if err := putCalls(tx, st.r, st.calls); err != nil {
			return err
		}
		if len(st.events) > 0 {
			if err := s.putEvents(tx, st.r, st.events); err != nil {
				return err
			}
		}
		if err := putRecord(tx, st.r); err != nil {
			return err
		}
	}
	return nil
}

// logsHeld reports whether the file holds session id's logs.
func logsHeld(tx *bolt.Tx, id string) bool {
	for _, name := range logBuckets {
		if tx.Bucket(name).Bucket([]byte(id)) == nil {
			return false
		}
	}
	return true
}

// logged publishes a group of Appends the log made durable: reads find
// them from now on.
func (s *Store) logged(entries []*entry) {
	if s.pend.add(entries) >= s.checkpointBytes {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
}

// checkpoints applies the log's entries to the file every
// checkpointEvery, or sooner when they hold checkpointBytes, until Close.
func (s *Store) checkpoints() {
	defer close(s.checkpointsDone)
	t := time.NewTicker(s.checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.full:
		case <-s.stopCheckpoints:
			return
		}
		// A failure leaves the entries logged and read from memory; the
		// next tick tries again (not each group the log writes meanwhile,
		// which would start a segment for each).
		if err := s.checkpoint(); err != nil {
			select {
			case <-t.C:
			case <-s.stopCheckpoints:
				return
			}
			select {
			case <-s.full:
			default:
			}
		}
	}
}

// checkpoint applies every entry logged so far to the file, in one
// transaction, and removes the segments that held them.
func (s *Store) checkpoint() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	rot := s.log.rotate()
	if rot.err != nil {
		return rot.err
	}
	// Every entry up to rot.gen is published: the log's goroutine
	// publishes a group before it takes a rotation.
	if entries := s.pend.upTo(rot.gen); len(entries) > 0 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			if err := s.applyEntries(tx, entries); err != nil {
				return err
			}
			return tx.Bucket(bucketMeta).Put(keyApplied, u64(rot.gen))
		})
		if err != nil {
			return fmt.Errorf("statestore: bolt checkpoint: %w", err)
		}
		s.pend.dropApplied(rot.gen)
	}
	return removeSegments(s.path, rot.seg)
}

// sessionLock serialises the Appends of a session.
type sessionLock struct {
	mu   sync.Mutex
	refs int
}

// lockSession locks session id against other Appends, and returns the
// unlock.
func (s *Store) lockSession(id string) func() {
	s.locksMu.Lock()
	l := s.locks[id]
	if l == nil {
		l = &sessionLock{}
		s.locks[id] = l
	}
	l.refs++
	s.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.locksMu.Unlock()
	}
}

// unapplied returns the entries of pend, taken before tx began, that tx's
// file does not hold and that belong to r's incarnation of its session.
func unapplied(tx *bolt.Tx, r *record, pend []*entry) []*entry {
	if len(pend) == 0 {
		return nil
	}
	applied := appliedGen(tx)
	var out []*entry
	for _, e := range pend {
		if e.gen > applied && e.order == r.Order {
			out = append(out, e)
		}
	}
	return out
}

// withLogged returns r's session with what the entries add to it.
func withLogged(r *record, entries []*entry) *statestore.Session {
	out := r.session()
	for _, e := range entries {
		out.LastSeq = max(out.LastSeq, e.lastSeq())
		out.Bytes += e.eventBytes + e.callDelta
	}
	return out
}
