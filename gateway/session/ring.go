package session

import (
	"sync"
	"sync/atomic"

	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// initialRing is the number of slots a ring starts with; it grows, up to
// its bounds, while a subscription lags.
const initialRing = 64

// slotArray holds the event with seq q at q % len.
type slotArray []atomic.Pointer[encoded.Event]

// ring holds a session's last live events, shared by all its
// subscriptions: publishing an event costs the same whatever the number of
// watchers, and each subscription reads the ring at its own pace with a
// cursor. A subscription whose cursor the ring has moved past is lagging.
//
// The ring starts small and doubles, when publishing would overwrite an
// event a subscription has still to read, until it holds maxEvents events
// or those it holds come to maxBytes (encoded): a watcher may fall that
// far behind before it is cut off, and a session nobody lags behind keeps
// a small ring.
//
// The session publishes with its lock held, so there is one writer;
// readers take a lock only to wait.
type ring struct {
	slots atomic.Pointer[slotArray]
	// last is the seq of the last event published. An event's slot, and
	// the array it is in, are stored before last moves past it.
	last atomic.Uint64
	// waiting says wake is set: a channel closed at the next publish,
	// which readers that found nothing new wait on. A publish nobody
	// waits for takes no lock.
	waiting atomic.Bool
	mu      sync.Mutex
	wake    chan struct{}

	// The publisher's alone: the bounds, the encoded size of the event in
	// each slot and of all it holds, and the seq up to which events no
	// subscription needs were let go, and the last seq at the previous
	// sweep.
	maxEvents, maxBytes int
	bytes               int
	swept, sweptAt      uint64
	// lapped is the last seq of the events publishing overwrote while a
	// subscription still had to read them, since the last sweep (0:
	// none): the next sweep cuts those subscriptions off.
	lapped uint64
}

// newRing returns a ring of at most maxEvents events and maxBytes bytes
// (of their encodings) whose next event has seq last+1.
func newRing(maxEvents, maxBytes int, last uint64) *ring {
	n := min(maxEvents, initialRing)
	r := &ring{maxEvents: maxEvents, maxBytes: maxBytes, swept: last, sweptAt: last}
	slots := make(slotArray, n)
	r.slots.Store(&slots)
	r.last.Store(last)
	return r
}

// sweepDue says the ring took enough events since its last sweep to sweep
// again: every 64 (a quarter of smaller rings), so that sweeping, which
// looks at every subscription, costs little per event; or that it lapped
// a subscription, which the sweep cuts off at once.
func (r *ring) sweepDue() bool {
	return r.lapped != 0 || r.last.Load()-r.sweptAt >= uint64(min(64, max(1, len(*r.slots.Load())/4)))
}

// sweep lets go of the events before seq need, which no subscription
// will read: the ring then keeps alive what is still to be read, not
// always its size in events.
func (r *ring) sweep(need uint64) {
	r.sweptAt = r.last.Load()
	if need == 0 || need-1 <= r.swept {
		return
	}
	slots := *r.slots.Load()
	n := uint64(len(slots))
	from, to := r.swept+1, need-1
	if to-from >= n {
		from = to - n + 1
	}
	for q := from; q <= to; q++ {
		if slot := &slots[q%n]; seqOf(slot.Load()) == q {
			r.bytes -= slot.Swap(nil).Size()
		}
	}
	r.swept = to
}

// publish appends events, numbered in sequence after the last one (the
// store took them), and wakes the readers waiting for them. An event
// counts its encoding's length in the ring's bytes. need gives the first
// seq a subscription still has to read, for when the ring must make room.
func (r *ring) publish(events []*encoded.Event, need func() uint64) {
	if len(events) == 0 {
		return
	}
	incoming := 0
	for _, e := range events {
		incoming += e.Size()
	}
	r.makeRoom(len(events), incoming, need)
	slots := *r.slots.Load()
	n := uint64(len(slots))
	for _, e := range events {
		if old := slots[e.Seq()%n].Swap(e); old != nil {
			r.bytes -= old.Size() // lapped: a subscription at it is lagging
		}
		r.bytes += e.Size()
	}
	r.last.Store(events[len(events)-1].Seq())
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

// makeRoom grows the ring, within its bounds, so that publishing k events
// of incoming bytes overwrites no event a subscription has still to read.
func (r *ring) makeRoom(k, incoming int, need func() uint64) {
	n := len(*r.slots.Load())
	last := r.last.Load()
	// Publishing overwrites the events up to seq last+k-n; those after
	// swept may still be read.
	fits := func(n int) bool { return last+uint64(k) <= r.swept+uint64(n) }
	if fits(n) {
		return
	}
	r.sweep(need())
	grown := n
	for !fits(grown) && 2*grown <= r.maxEvents && r.bytes+incoming <= r.maxBytes {
		grown *= 2
	}
	if grown > n {
		r.grow(grown)
	}
	if !fits(grown) {
		// At its bounds: the events up to this seq are overwritten, and
		// the subscriptions that still had to read one are lagging.
		r.lapped = max(r.lapped, last+uint64(k)-uint64(grown))
	}
}

// grow moves the events still held to an array of n slots. Readers that
// loaded the old array still find there the events published before.
func (r *ring) grow(n int) {
	old := *r.slots.Load()
	on := uint64(len(old))
	slots := make(slotArray, n)
	last := r.last.Load()
	from := r.swept + 1
	if last >= on && last-on+1 > from {
		from = last - on + 1
	}
	for q := from; q <= last; q++ {
		if ev := old[q%on].Load(); seqOf(ev) == q {
			slots[q%uint64(n)].Store(ev)
		}
	}
	r.slots.Store(&slots)
}

// at returns the event with seq q, or nil when the ring no longer holds it.
// q must have been published: the array at hands out is then one that q
// was stored in, or copied to when the ring grew, since both happen before
// last moves past q.
func (r *ring) at(q uint64) *encoded.Event {
	slots := *r.slots.Load()
	if ev := slots[q%uint64(len(slots))].Load(); seqOf(ev) == q {
		return ev
	}
	return nil
}

// seqOf is an event's seq, 0 for no event (an empty slot).
func seqOf(e *encoded.Event) uint64 {
	if e == nil {
		return 0
	}
	return e.Seq()
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
