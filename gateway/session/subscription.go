package session

import (
	"context"
	"sync"
	"sync/atomic"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventwire"
)

// replayPage is how many stored events a subscription reads at a time.
const replayPage = 256

// Subscription delivers a session's events in seq order: first the stored
// events after its starting point, then live ones from the session's ring.
// A subscription that falls more than the watch buffer behind (its next
// event has left the ring) is cut off with ErrLagging; the client resumes
// from the last seq it saw.
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
	page []*acpv2.SessionEvent

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
	sub.endOnce.Do(func() {
		sub.err, sub.endSeq = err, s.stored
		close(sub.ended)
	})
	if len(s.subs) == 0 {
		// The ring's events are let go; a subscription still reading to
		// its end keeps the ring it has.
		s.live = nil
	}
	s.touchLocked()
}

// sweepLocked lets go of the ring's events that every subscription has
// read. s.mu must be held.
func (s *Session) sweepLocked() { s.live.sweep(s.needLocked()) }

// needLocked returns the first seq a subscription has still to read from
// the ring. s.mu must be held.
func (s *Session) needLocked() uint64 {
	need := s.stored + 1
	for sub := range s.subs {
		need = min(need, sub.need.Load())
	}
	return need
}

// NextBatch fills dst with the next events, as many as are there (at least
// one), waiting for one if need be, and returns how many it wrote. Once
// every event delivered before the subscription ended has been returned, it
// returns why it ended (ErrLagging, ErrClosed, ErrShutdown, ErrMoved); or
// ctx's error. Live events come with the encoding the session made, and
// replayed ones with the bytes the store read them from.
func (sub *Subscription) NextBatch(ctx context.Context, dst []Event) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	if sub.next < sub.liveFrom {
		if len(sub.page) == 0 {
			events, err := readEvents(ctx, sub.s.m.opts.Store, sub.s.rec.ID, sub.next-1, replayPage)
			if err != nil {
				return 0, err
			}
			for _, ev := range events {
				// A snapshot in place of trimmed events may reflect live
				// events too: those are then skipped.
				if ev.GetSeq() < sub.liveFrom || ev.GetSnapshot() != nil {
					sub.page = append(sub.page, ev)
				}
			}
			if len(sub.page) == 0 {
				// The store holds nothing more before the live point.
				sub.next = sub.liveFrom
			}
		}
		if len(sub.page) > 0 {
			n := replayed(dst, sub.page)
			sub.page = sub.page[n:]
			sub.next = dst[n-1].GetSeq() + 1
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
				dst[n] = *ev
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

// replayed fills dst with events read from the store, and returns how
// many.
func replayed(dst []Event, events []*acpv2.SessionEvent) int {
	n := min(len(dst), len(events))
	for i, ev := range events[:n] {
		dst[i] = storedEvent(ev)
	}
	return n
}

// storedEvent is an event read from the store, with its encoding from
// eventwire, where the store's Events left the bytes it decoded.
func storedEvent(ev *acpv2.SessionEvent) Event {
	wire, _ := eventwire.Marshal(ev)
	return Event{SessionEvent: ev, Wire: wire}
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
