package session

import (
	"sync"
	"sync/atomic"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// ring holds a session's last live events, shared by all its
// subscriptions: publishing an event costs the same whatever the number of
// watchers, and each subscription reads the ring at its own pace with a
// cursor. A subscription whose cursor the ring has moved past is lagging.
//
// The session publishes with its lock held, so there is one writer;
// readers take a lock only to wait.
type ring struct {
	// slots holds the event with seq q at q % len(slots).
	slots []atomic.Pointer[acpv2.SessionEvent]
	// last is the seq of the last event published. An event's slot is
	// stored before last moves past it.
	last atomic.Uint64
	// waiting says wake is set: a channel closed at the next publish,
	// which readers that found nothing new wait on. A publish nobody
	// waits for takes no lock.
	waiting atomic.Bool
	mu      sync.Mutex
	wake    chan struct{}
	// The publisher's alone: the seq up to which events no subscription
	// needs were let go, and the last seq at the previous sweep.
	swept, sweptAt uint64
}

// newRing returns a ring of size events whose next event has seq last+1.
func newRing(size int, last uint64) *ring {
	r := &ring{slots: make([]atomic.Pointer[acpv2.SessionEvent], size), swept: last, sweptAt: last}
	r.last.Store(last)
	return r
}

// sweepDue says the ring took enough events since its last sweep to sweep
// again: every 64 (a quarter of smaller rings), so that sweeping, which
// looks at every subscription, costs little per event.
func (r *ring) sweepDue() bool {
	return r.last.Load()-r.sweptAt >= uint64(min(64, max(1, len(r.slots)/4)))
}

// sweep lets go of the events before seq need, which no subscription
// will read: the ring then keeps alive what is still to be read, not
// always its size in events.
func (r *ring) sweep(need uint64) {
	r.sweptAt = r.last.Load()
	if need == 0 || need-1 <= r.swept {
		return
	}
	n := uint64(len(r.slots))
	from, to := r.swept+1, need-1
	if to-from >= n {
		from = to - n + 1
	}
	for q := from; q <= to; q++ {
		if slot := &r.slots[q%n]; slot.Load().GetSeq() == q {
			slot.Store(nil)
		}
	}
	r.swept = to
}

// publish appends events, numbered in sequence after the last one, and
// wakes the readers waiting for them.
func (r *ring) publish(events []*acpv2.SessionEvent) {
	if len(events) == 0 {
		return
	}
	for _, ev := range events {
		r.slots[ev.GetSeq()%uint64(len(r.slots))].Store(ev)
	}
	r.last.Store(events[len(events)-1].GetSeq())
	if r.waiting.Load() {
		r.mu.Lock()
		ch := r.wake
		r.wake = nil
		r.waiting.Store(false)
		r.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}
}

// at returns the event with seq q, or nil when the ring no longer holds it.
// q must have been published.
func (r *ring) at(q uint64) *acpv2.SessionEvent {
	ev := r.slots[q%uint64(len(r.slots))].Load()
	if ev.GetSeq() != q {
		return nil
	}
	return ev
}

// waiter returns a channel closed at the next publish. A reader calls it,
// then checks last again before waiting on it, so that no publish is
// missed between its check and its wait.
func (r *ring) waiter() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake == nil {
		r.wake = make(chan struct{})
		r.waiting.Store(true)
	}
	return r.wake
}
