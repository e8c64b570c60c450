package session

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// replayPage is how many stored events a subscription reads at a time.
const replayPage = 256

// Subscription delivers a session's events in seq order: first the stored
// events after its starting point, then live ones from the session's ring.
// A subscription that falls more than the watch buffer behind (its next
// event has left the ring) is cut off with ErrLagging; the client resumes
// from the last seq it saw. One lapped while it replays is cut off once it
// has replayed what was stored when it subscribed, so that each resumption
// makes progress.
//
// It is cut off when the ring laps it, whatever its reader is doing; a
// reader stuck in a write to a client that stopped reading is told so by
// OnStall.
type Subscription struct {
	s *Session
	// live is the session's ring; events from seq liveFrom on are read
	// there, earlier ones from the store.
	live     *ring
	liveFrom uint64
	// next is the seq NextBatch returns next.
	next uint64
	// need is the first seq the subscription may still read from the
	// ring, for the session's sweeps.
	need atomic.Uint64
	page []*encoded.Event

	// Under s.mu: the ring lapped the subscription (it is ended, with
	// ErrLagging, and no longer holds the ring's events back); OnStall's
	// functions, the write the sweeps last saw under way, and the
	// session's last seq when they first saw it.
	cut          bool
	writing      func() uint64
	onStall      func()
	write, since uint64

	endOnce sync.Once
	ended   chan struct{}
	// Set before ended closes: why the subscription ended, and the seq of
	// the last event published before it did, which it still returns.
	err    error
	endSeq uint64
}

// subscribeLocked registers a subscription for events after afterSeq.
// s.mu must be held.
func (s *Session) subscribeLocked(afterSeq uint64) *Subscription {
	if s.live == nil {
		// Made with the first subscription: a session nobody watched
		// needs no ring, and its past events are in the store.
		s.live = newRing(s.m.opts.WatchBuffer, s.m.opts.WatchBufferBytes, s.stored)
	}
	sub := &Subscription{
		s:        s,
		live:     s.live,
		next:     afterSeq + 1,
		liveFrom: s.stored + 1,
		ended:    make(chan struct{}),
	}
	sub.need.Store(max(sub.next, sub.liveFrom))
	s.subs[sub] = struct{}{}
	s.met.Watchers(1)
	return sub
}

// unsubscribeLocked removes sub, ending it with err. s.mu must be held.
func (s *Session) unsubscribeLocked(sub *Subscription, err error) {
	if _, ok := s.subs[sub]; !ok {
		return
	}
	delete(s.subs, sub)
	s.met.Watchers(-1)
	sub.end(err, s.stored)
	if len(s.subs) == 0 {
		// The ring's events are let go; a subscription still reading to
		// its end keeps the ring it has.
		s.live = nil
	}
	s.touchLocked()
}

// end ends sub with err after the events up to seq endSeq.
func (sub *Subscription) end(err error, endSeq uint64) {
	sub.endOnce.Do(func() {
		sub.err, sub.endSeq = err, endSeq
		close(sub.ended)
	})
}

// sweepLocked cuts off the subscriptions the ring lapped, tells those
// cut off whose reader is stuck, and lets go of the ring's events that
// every other subscription has read. s.mu must be held.
//
// A subscription the ring lapped is cut off at once rather than when its
// reader next asks for events, which a reader blocked in a write to a
// client that reads nothing would not do: it no longer holds the ring's
// events back (each publish would sweep for it), and once one write of its
// reader has been under way while the session published as many events as
// the ring holds (minStall at the least), OnStall's stall ends that write. A reader that is not
// stuck gets ErrLagging from NextBatch as before.
func (s *Session) sweepLocked() {
	r := s.live
	lapped := r.lapped
	r.lapped = 0
	need := s.stored + 1
	for sub := range s.subs {
		q := sub.need.Load()
		if !sub.cut && q <= lapped {
			sub.cut = true
			sub.end(ErrLagging, s.stored)
		}
		if !sub.cut {
			need = min(need, q)
		}
		if sub.onStall != nil {
			s.watchLocked(sub)
		}
	}
	r.sweep(need)
}

// minStall is the fewest events a cut-off subscription's write must stay
// under way for before it is ended as stuck, however small the ring: a
// small ring is lapped in a few events, which a client that reads, on a
// busy host, can take to accept one write.
const minStall = 1024

// watchLocked notes which write sub's reader is in, and when it is cut
// off and the same write has been under way while the ring went by, calls
// its stall. s.mu must be held.
func (s *Session) watchLocked(sub *Subscription) {
	if w := sub.writing(); w == 0 || w != sub.write {
		sub.write, sub.since = w, s.stored
	} else if sub.cut && s.stored-sub.since >= uint64(max(len(*s.live.slots.Load()), minStall)) {
		go sub.onStall()
		sub.onStall = nil
	}
}

// needLocked returns the first seq a subscription has still to read from
// the ring; those cut off need none. s.mu must be held.
func (s *Session) needLocked() uint64 {
	need := s.stored + 1
	for sub := range s.subs {
		if !sub.cut {
			need = min(need, sub.need.Load())
		}
	}
	return need
}

// OnStall watches the writes of the subscription's caller: writing names
// the write under way, 0 when there is none. If the subscription is cut
// off for lagging while one write stays under way as the session
// publishes as many events as the ring holds (minStall at the least), the
// caller is stuck, in a write to a client that stopped reading, and stall
// is called, once and in a goroutine of its own, to end that write. A caller that is not stuck
// gets ErrLagging from NextBatch. writing is called with the session's
// lock held: it must be quick.
func (sub *Subscription) OnStall(writing func() uint64, stall func()) {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	sub.writing, sub.onStall = writing, stall
	sub.write, sub.since = writing(), sub.s.stored
}

// NextBatch fills dst with the next events, as many as are there (at least
// one), waiting for one if need be, and returns how many it wrote. Once
// every event delivered before the subscription ended has been returned, it
// returns why it ended (ErrLagging, ErrClosed, ErrShutdown, ErrMoved); or
// ctx's error. Live events are the session's, and replayed ones are made
// from the bytes the store read.
func (sub *Subscription) NextBatch(ctx context.Context, dst []*encoded.Event) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	if sub.next < sub.liveFrom {
		// The replay goes on though the ring lapped the subscription
		// meanwhile, which cuts it off where the replay ends: what was
		// stored when it subscribed is in the store still, and a client
		// resuming behind a flood that laps it before it reads makes
		// progress with every Watch rather than none.
		if len(sub.page) == 0 {
			events, err := readEvents(ctx, sub.s.m.opts.Store, sub.s.rec.ID, sub.next-1, replayPage, sub.s)
			if err != nil {
				return 0, err
			}
			for _, ev := range events {
				// A snapshot in place of trimmed events may reflect live
				// events too: those are then skipped.
				if ev.Seq() < sub.liveFrom || ev.Kind() == encoded.Snapshot {
					sub.page = append(sub.page, ev)
				}
			}
			if len(sub.page) == 0 {
				// The store holds nothing more before the live point.
				sub.next = sub.liveFrom
			}
		}
		if len(sub.page) > 0 {
			n := copy(dst, sub.page)
			clear(sub.page[:n])
			sub.page = sub.page[n:]
			sub.next = dst[n-1].Seq() + 1
			sub.need.Store(max(sub.next, sub.liveFrom))
			return n, nil
		}
	}
	for {
		ended := false
		select {
		case <-sub.ended:
			ended = true
		default:
		}
		last := sub.live.last.Load()
		if ended {
			// Events delivered before the end are returned before the
			// end is.
			last = min(last, sub.endSeq)
		}
		if sub.next <= last {
			n := 0
			for ; n < len(dst) && sub.next <= last; n++ {
				ev := sub.live.at(sub.next)
				if ev == nil {
					if n > 0 {
						break // what was read first, then the cut
					}
					return 0, sub.lagging()
				}
				dst[n] = ev
				sub.next++
			}
			sub.need.Store(sub.next)
			return n, nil
		}
		if ended {
			return 0, sub.err
		}
		wake := sub.live.waiter()
		if sub.live.last.Load() >= sub.next {
			continue
		}
		select {
		case <-wake:
		case <-sub.ended:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// lagging cuts off a subscription whose next event has left the ring.
func (sub *Subscription) lagging() error {
	sub.s.mu.Lock()
	sub.s.unsubscribeLocked(sub, ErrLagging)
	sub.s.mu.Unlock()
	return ErrLagging
}

// LastSeq is the seq of the last event NextBatch returned.
func (sub *Subscription) LastSeq() uint64 { return sub.next - 1 }

// Close unregisters the subscription.
func (sub *Subscription) Close() {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	sub.s.unsubscribeLocked(sub, context.Canceled)
}
