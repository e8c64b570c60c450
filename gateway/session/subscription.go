package session

import (
	"context"
	"sync"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// replayPage is how many stored events a subscription reads at a time.
const replayPage = 256

// Subscription delivers a session's events in seq order: first the stored
// events after its starting point, then live ones. A subscription that falls
// more than the watch buffer behind is cut off with ErrLagging; the client
// resumes from the last seq it saw.
type Subscription struct {
	s *Session
	// next is the seq Next returns next.
	next uint64
	// live holds events after seq liveFrom-1, pushed by the session.
	liveFrom uint64
	live     chan *acpv2.SessionEvent
	page     []*acpv2.SessionEvent

	endOnce sync.Once
	ended   chan struct{}
	err     error // why it ended, set before ended closes
}

// subscribeLocked registers a subscription for events after afterSeq.
// s.mu must be held.
func (s *Session) subscribeLocked(afterSeq uint64) *Subscription {
	sub := &Subscription{
		s:        s,
		next:     afterSeq + 1,
		liveFrom: s.seq + 1,
		live:     make(chan *acpv2.SessionEvent, s.m.opts.WatchBuffer),
		ended:    make(chan struct{}),
	}
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
	sub.end(err)
	s.touchLocked()
}

func (sub *Subscription) end(err error) {
	sub.endOnce.Do(func() {
		sub.err = err
		close(sub.ended)
	})
}

// publish hands live events to the subscription without ever blocking; a
// full buffer cuts it off. The session's lock is held.
func (sub *Subscription) publish(events []*acpv2.SessionEvent) {
	for _, ev := range events {
		select {
		case sub.live <- ev:
		default:
			sub.s.unsubscribeLocked(sub, ErrLagging)
			return
		}
	}
}

// Next returns the next event. It returns the error the subscription ended
// with (ErrLagging, ErrClosed, ErrShutdown) once every event delivered before
// the end has been returned, or ctx's error.
func (sub *Subscription) Next(ctx context.Context) (*acpv2.SessionEvent, error) {
	if sub.next < sub.liveFrom {
		if len(sub.page) == 0 {
			events, err := readEvents(ctx, sub.s.m.opts.Store, sub.s.rec.ID, sub.next-1, replayPage)
			if err != nil {
				return nil, err
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
			ev := sub.page[0]
			sub.page = sub.page[1:]
			sub.next = ev.GetSeq() + 1
			return ev, nil
		}
	}
	for {
		// Events delivered before the end are returned before the end is.
		var ev *acpv2.SessionEvent
		select {
		case ev = <-sub.live:
		default:
			select {
			case ev = <-sub.live:
			case <-sub.ended:
				select {
				case ev = <-sub.live:
				default:
					return nil, sub.err
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if ev.GetSeq() < sub.next {
			continue // already replayed from the store
		}
		sub.next = ev.GetSeq() + 1
		return ev, nil
	}
}

// LastSeq is the seq of the last event Next returned.
func (sub *Subscription) LastSeq() uint64 { return sub.next - 1 }

// Close unregisters the subscription.
func (sub *Subscription) Close() {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	sub.s.unsubscribeLocked(sub, context.Canceled)
}
