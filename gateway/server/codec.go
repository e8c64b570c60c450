package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Bounds of the cache of event encodings: enough for the events that all
// the streams of busy sessions are sending at one time.
const (
	cacheEntries = 4096
	cacheBytes   = 32 << 20
	// An event larger than this is marshalled for each stream rather
	// than kept.
	cacheEntryMaxBytes = 4 << 20
)

// protoCodec is connect's "proto" codec, except that a stream message
// holding only an event (a PromptResponse or WatchResponse) reuses that
// event's encoding: an event is sent by every stream watching its session,
// and marshalling it (its google.protobuf.Struct values above all) once per
// stream was the gateway's largest cost with many watchers. The output is
// the bytes proto.Marshal gives for the message (which, like it, writes
// map entries in no set order), and the same for every stream while the
// event is cached.
type protoCodec struct{ events *eventCache }

func newProtoCodec() *protoCodec {
	return &protoCodec{events: newEventCache(cacheEntries, cacheBytes, proto.Marshal)}
}

func (*protoCodec) Name() string { return "proto" }

func (*protoCodec) IsBinary() bool { return true }

func (c *protoCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

func (c *protoCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if ev := soleEvent(m); ev != nil {
		return c.appendEvent(dst, ev)
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

// soleEvent returns the event of a stream message (a PromptResponse or
// WatchResponse) whose only field is its event, else nil.
func soleEvent(m any) *acpv2.SessionEvent {
	var r interface {
		proto.Message
		GetEvent() *acpv2.SessionEvent
		GetHeartbeat() *timestamppb.Timestamp
	}
	switch m := m.(type) {
	case *acpv2.PromptResponse:
		r = m
	case *acpv2.WatchResponse:
		r = m
	default:
		return nil
	}
	if r.GetHeartbeat() != nil || len(r.ProtoReflect().GetUnknown()) != 0 {
		return nil
	}
	return r.GetEvent()
}

// eventField is the number of the event field of PromptResponse and
// WatchResponse.
const eventField = 1

// appendEvent appends the encoding of a response whose only field is ev.
func (c *protoCodec) appendEvent(dst []byte, ev *acpv2.SessionEvent) ([]byte, error) {
	wire, err := c.events.get(ev)
	if err != nil {
		return nil, err
	}
	dst = protowire.AppendTag(dst, eventField, protowire.BytesType)
	return protowire.AppendBytes(dst, wire), nil
}

func (*protoCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto(m)
	}
	if err := proto.Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

func (*protoCodec) MarshalStable(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pm)
}

func errNotProto(m any) error { return fmt.Errorf("%T doesn't implement proto.Message", m) }

// jsonCodec is connect's "json" codec, except that, as protoCodec does, it
// reuses the encoding of the event of a stream message that holds only
// one. Its output is protojson.Marshal's.
type jsonCodec struct{ events *eventCache }

func newJSONCodec() *jsonCodec {
	return &jsonCodec{events: newEventCache(cacheEntries, cacheBytes, protojson.MarshalOptions{}.Marshal)}
}

func (*jsonCodec) Name() string { return "json" }

func (*jsonCodec) IsBinary() bool { return false }

func (c *jsonCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// jsonEventField opens the JSON of a response whose only field is its
// event.
const jsonEventField = `{"event":`

func (c *jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if ev := soleEvent(m); ev != nil {
		wire, err := c.events.get(ev)
		if err != nil {
			return nil, err
		}
		dst = append(append(dst, jsonEventField...), wire...)
		return append(dst, '}'), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (*jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto(m)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	// Discard unknown fields, as connect's codec does, so that clients
	// and servers need not use exactly the same schema.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

func (c *jsonCodec) MarshalStable(m any) ([]byte, error) {
	// As connect's: protojson orders fields, but not its whitespace.
	data, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// eventCache holds the encodings of the events last sent, by event. An
// event is never changed once published, so its pointer names its
// encoding. The oldest entries go first, beyond a number of entries or of
// bytes. An entry is found by its event's address and holds the event by
// a weak pointer, which tells whether the event at that address is still
// the one encoded: the cache keeps encodings, not events (the session and
// a memory store let go of those in their own time). It is safe for
// concurrent use.
type eventCache struct {
	maxBytes int
	marshal  func(proto.Message) ([]byte, error)

	mu sync.Mutex
	// m finds an entry by its event's address; the entry's weak pointer
	// says whether it is still that event's.
	m     map[uintptr]*cached
	order []*cached // a ring of the entries, oldest at next
	next  int
	bytes int
}

type cached struct {
	addr uintptr
	ev   weak.Pointer[acpv2.SessionEvent]
	once sync.Once
	wire []byte
	err  error
	// slot is the entry's index in eventCache.order; size is what it
	// counts in eventCache.bytes.
	slot, size int
}

func newEventCache(maxEntries, maxBytes int, marshal func(proto.Message) ([]byte, error)) *eventCache {
	return &eventCache{
		maxBytes: maxBytes,
		marshal:  marshal,
		m:        make(map[uintptr]*cached, maxEntries),
		order:    make([]*cached, maxEntries),
	}
}

// get returns ev's encoding, marshalling it on the first call: callers
// that ask at the same time wait for that one marshal.
func (c *eventCache) get(ev *acpv2.SessionEvent) ([]byte, error) {
	addr := uintptr(unsafe.Pointer(ev))
	c.mu.Lock()
	e := c.m[addr]
	// An entry for an event freed since, whose memory ev may have
	// taken, has a weak pointer that no longer gives an event. Its
	// cleanup evicts it, but later, on the cleanup goroutine: the
	// memory can be reused before then.
	if e == nil || e.ev.Value() != ev {
		c.evict(e)
		e = &cached{addr: addr, ev: weak.Make(ev), slot: c.next}
		c.evict(c.order[c.next])
		c.m[addr], c.order[c.next] = e, e
		c.next = (c.next + 1) % len(c.order)
		// Drop the encoding as soon as its event is freed, rather than
		// when newer events push it out: idle sessions keep no cache.
		runtime.AddCleanup(ev, c.drop, e)
	}
	c.mu.Unlock()
	e.once.Do(func() {
		e.wire, e.err = c.marshal(ev)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.m[addr] != e {
			return // evicted meanwhile
		}
		if e.err != nil || len(e.wire) > min(cacheEntryMaxBytes, c.maxBytes) {
			c.evict(e) // marshalled again next time
			return
		}
		e.size = len(e.wire)
		c.bytes += e.size
		// The oldest go first; e, the newest, fits alone.
		for i := c.next; c.bytes > c.maxBytes; i = (i + 1) % len(c.order) {
			if c.order[i] != e {
				c.evict(c.order[i])
			}
		}
	})
	return e.wire, e.err
}

// drop evicts the entry of an event that has been freed.
func (c *eventCache) drop(e *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(e)
}

// evict drops e, if it is still held. c.mu must be held.
func (c *eventCache) evict(e *cached) {
	if e == nil || c.order[e.slot] != e {
		return
	}
	delete(c.m, e.addr)
	c.order[e.slot] = nil
	c.bytes -= e.size
}

// len returns the number of entries and the bytes they count.
func (c *eventCache) len() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
