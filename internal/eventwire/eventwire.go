// Package eventwire keeps the encodings of the session events the gateway
// has at hand, so that an event is marshalled once however many times it
// is stored and sent.
//
// A session encodes each event once, when it numbers it ([WithBody] and
// [WithBodyIn] make the encoding from the event field's, made already),
// and hands the bytes to the store and, with the event, to the streams,
// which send them as a [Reply]. An event is never changed once published,
// so its pointer names its encoding: [Proto] is the process's cache of
// protobuf encodings for the events that come without theirs. A store that
// decodes an event from its bytes hands them to [Remember] (through
// [Unmarshal]), so a replayed event is not marshalled again either.
package eventwire

import (
	"sync"
	"time"
	"unsafe"
	"weak"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Bounds of the shared cache: enough for the events that all the streams
// of busy sessions are sending at one time.
const (
	DefaultEntries = 4096
	DefaultBytes   = 32 << 20
	// An event larger than this is marshalled each time rather than kept.
	entryMaxBytes = 4 << 20
)

// Proto is the process's cache of the events' protobuf encodings
// (proto.Marshal's).
var Proto = New(DefaultEntries, DefaultBytes, proto.Marshal)

// Marshal returns ev's protobuf encoding from [Proto]. The bytes are
// shared: the caller must not modify them.
func Marshal(ev *acpv2.SessionEvent) ([]byte, error) { return Proto.Get(ev) }

// Unmarshal decodes an event from wire and records wire in [Proto] as its
// encoding, so that a stream that sends the event does not marshal it
// again: a store's Events reads its events so. wire must not be modified
// afterwards.
func Unmarshal(wire []byte) (*acpv2.SessionEvent, error) {
	ev := &acpv2.SessionEvent{}
	if err := proto.Unmarshal(wire, ev); err != nil {
		return nil, err
	}
	Remember(ev, wire)
	return ev, nil
}

// Remember records in [Proto] that wire is ev's protobuf encoding, as when
// ev was just decoded from it. wire must not be modified afterwards.
func Remember(ev *acpv2.SessionEvent, wire []byte) { Proto.Remember(ev, wire) }

// WithBody returns ev's encoding made of its seq and time and body, the
// encoding of the message in its event field, whose number is field (as
// a merged tool call's encoding that merge.State.Wire made from the parts
// of the version before it), or false for an event whose encoding cannot
// be made that way (unknown fields). The encoding is a copy: body stays
// the caller's.
func WithBody(ev *acpv2.SessionEvent, field protowire.Number, body []byte) ([]byte, bool) {
	h, ok := head(make([]byte, 0, Headroom+len(body)), ev, field, len(body))
	if !ok {
		return nil, false
	}
	return append(h, body...), true
}

// Headroom is the room WithBodyIn needs before a body: more than an
// event's seq and time and its event field's tag and length take.
const Headroom = 48

// WithBodyIn is WithBody for a body at buf[Headroom:]: the head is
// written into the room before it, and the encoding is the rest of buf
// from there, without a copy. buf must not be used afterwards.
func WithBodyIn(ev *acpv2.SessionEvent, field protowire.Number, buf []byte) ([]byte, bool) {
	var room [Headroom]byte
	h, ok := head(room[:0], ev, field, len(buf)-Headroom)
	if !ok {
		return nil, false
	}
	start := Headroom - len(h)
	copy(buf[start:], h)
	return buf[start:], true
}

// Reply is a stream message (a PromptResponse or WatchResponse) whose only
// field is its event, with that event's protobuf encoding: the gateway's
// proto codec writes Event rather than marshal the event again. It is
// itself the message, for whatever reads a stream's messages on the way.
type Reply struct {
	proto.Message
	// Event is the encoding of the message's event; nil when not known.
	Event []byte
}

// head appends to b what comes before the body in ev's encoding, in field
// order as proto.Marshal writes them: seq (1), time (2: seconds 1, nanos
// 2), then the tag of the event field, number field, and the body's
// length. It fails for an event whose encoding is not made that way.
func head(b []byte, ev *acpv2.SessionEvent, field protowire.Number, bodyLen int) ([]byte, bool) {
	if len(ev.ProtoReflect().GetUnknown()) != 0 || len(ev.GetTime().ProtoReflect().GetUnknown()) != 0 {
		return nil, false
	}
	if ev.Seq != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, ev.Seq)
	}
	if t := ev.Time; t != nil {
		var tb [24]byte
		tm := tb[:0]
		if t.Seconds != 0 {
			tm = protowire.AppendTag(tm, 1, protowire.VarintType)
			tm = protowire.AppendVarint(tm, uint64(t.Seconds))
		}
		if t.Nanos != 0 {
			tm = protowire.AppendTag(tm, 2, protowire.VarintType)
			tm = protowire.AppendVarint(tm, uint64(int64(t.Nanos)))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, tm)
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(bodyLen))
	return b, len(b) <= Headroom
}

// Cache holds the encodings of the events last asked for, by event. An
// entry is found by its event's address and holds the event by a weak
// pointer, which tells whether the event at that address is still the one
// encoded: the cache keeps encodings, not events. (Holding the events
// until they expire grew the heap in use of idle sessions by half, in
// spans their events had shared.) An encoding not asked for during a whole
// tick (about [Expiry]) is let go, so sessions gone quiet keep none; the
// oldest go first beyond a number of entries or of bytes. (A cleanup per
// event, to let go of an encoding as soon as its event is freed, made
// BenchmarkGetNewEvent about 2.6 times as long: 1.4 against 0.54 µs on
// the machine of commit 0d4cb62.) It is safe for concurrent use.
type Cache struct {
	maxBytes int
	marshal  func(proto.Message) ([]byte, error)

	mu sync.Mutex
	// m finds an entry by its event's address; the entry's weak pointer
	// says whether it is still that event's.
	m     map[uintptr]*entry
	order []*entry // a ring of the entries, oldest at next
	next  int
	bytes int
	// tick counts the expiry timer's runs; timer runs while entries are
	// held.
	tick  uint64
	timer *time.Timer
}

// Expiry is how long the cache keeps an encoding nobody asks for: between
// one and two ticks of this length.
const Expiry = time.Second

type entry struct {
	addr uintptr
	ev   weak.Pointer[acpv2.SessionEvent]
	once sync.Once
	wire []byte
	err  error
	// held is set once wire is, while the entry is in the cache.
	held bool
	// used is the tick of the last Get or Remember.
	used uint64
	// slot is the entry's index in Cache.order; size is what it counts in
	// Cache.bytes.
	slot, size int
}

// New returns a cache of at most maxEntries encodings and maxBytes bytes,
// made by marshal.
func New(maxEntries, maxBytes int, marshal func(proto.Message) ([]byte, error)) *Cache {
	return &Cache{
		maxBytes: maxBytes,
		marshal:  marshal,
		m:        make(map[uintptr]*entry, maxEntries),
		order:    make([]*entry, maxEntries),
	}
}

// Get returns ev's encoding, marshalling it on the first call: callers
// that ask at the same time wait for that one marshal. The bytes are
// shared: the caller must not modify them.
func (c *Cache) Get(ev *acpv2.SessionEvent) ([]byte, error) {
	c.mu.Lock()
	e, _ := c.entryLocked(ev)
	c.mu.Unlock()
	e.once.Do(func() {
		wire, err := c.marshal(ev)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.setLocked(e, wire, err)
	})
	return e.wire, e.err
}

// Remember records that wire is ev's encoding, unless ev has one already.
// wire must not be modified afterwards.
func (c *Cache) Remember(ev *acpv2.SessionEvent, wire []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, fresh := c.entryLocked(ev); fresh {
		e.once.Do(func() { c.setLocked(e, wire, nil) })
	}
}

// entryLocked returns ev's entry, adding one (fresh) when it has none.
// c.mu must be held.
func (c *Cache) entryLocked(ev *acpv2.SessionEvent) (e *entry, fresh bool) {
	addr := uintptr(unsafe.Pointer(ev))
	e = c.m[addr]
	// An entry for an event freed since, whose memory ev may have taken,
	// has a weak pointer that no longer gives an event.
	if e != nil && e.ev.Value() == ev {
		e.used = c.tick
		return e, false
	}
	c.evict(e)
	e = &entry{addr: addr, ev: weak.Make(ev), used: c.tick, slot: c.next}
	c.evict(c.order[c.next])
	c.m[addr], c.order[c.next] = e, e
	c.next = (c.next + 1) % len(c.order)
	if c.timer == nil {
		c.timer = time.AfterFunc(Expiry, c.expire)
	}
	return e, true
}

// setLocked gives e its encoding and counts it, evicting the oldest
// entries beyond the cache's bytes. c.mu must be held.
func (c *Cache) setLocked(e *entry, wire []byte, err error) {
	e.wire, e.err = wire, err
	if c.m[e.addr] != e {
		return // evicted meanwhile
	}
	if e.err != nil || len(e.wire) > min(entryMaxBytes, c.maxBytes) {
		c.evict(e) // marshalled again next time
		return
	}
	e.size, e.held = len(e.wire), true
	c.bytes += e.size
	// The oldest go first; e, the newest, fits alone.
	for i := c.next; c.bytes > c.maxBytes; i = (i + 1) % len(c.order) {
		if c.order[i] != e {
			c.evict(c.order[i])
		}
	}
}

// expire runs once a tick while entries are held: it evicts those not
// asked for since the tick before and those whose event was freed, and
// stops once none are left.
func (c *Cache) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	for _, e := range c.order {
		if e != nil && (e.used+1 < c.tick || e.ev.Value() == nil) {
			c.evict(e)
		}
	}
	if len(c.m) == 0 {
		c.timer = nil
		return
	}
	c.timer.Reset(Expiry)
}

// evict drops e, if it is still held. c.mu must be held.
func (c *Cache) evict(e *entry) {
	if e == nil || c.order[e.slot] != e {
		return
	}
	delete(c.m, e.addr)
	c.order[e.slot] = nil
	c.bytes -= e.size
}

// Held reports whether the cache holds ev's encoding, so that Get gives it
// without a marshal.
func (c *Cache) Held(ev *acpv2.SessionEvent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[uintptr(unsafe.Pointer(ev))]
	return e != nil && e.held && e.ev.Value() == ev
}

// Len returns the number of entries and the bytes they count.
func (c *Cache) Len() (entries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
