package eventwire

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
	"weak"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// testEvents are events of several kinds, with Struct values and without.
func testEvents(t *testing.T) []*acpv2.SessionEvent {
	t.Helper()
	var events []*acpv2.SessionEvent
	for i, js := range []string{
		`{"seq":"1","time":"2026-01-02T03:04:05.678Z","agentMessageChunk":{"content":{"text":{"text":"hello"}}}}`,
		`{"seq":"2","agentMessageChunk":{"content":{"text":{"text":"x","meta":{"b":1,"a":[true,null,"s"]}}}}}`,
		`{"seq":"3","toolCall":{"toolCallId":"t1","title":"Run","kind":"execute","status":"in_progress","rawInput":{"cmd":"go test"}}}`,
		`{"seq":"4","turnEnded":{"stopReason":"end_turn"}}`,
	} {
		ev := &acpv2.SessionEvent{}
		if err := protojson.Unmarshal([]byte(js), ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		events = append(events, ev)
	}
	return events
}

// A remembered encoding is what Get returns, without a marshal; an event
// that has an encoding already keeps it.
func TestRememberedEncodingIsNotMarshalledAgain(t *testing.T) {
	marshals := 0
	c := New(8, 1<<20, func(m proto.Message) ([]byte, error) {
		marshals++
		return proto.Marshal(m)
	})
	events := testEvents(t)
	decoded := &acpv2.SessionEvent{}
	wire, _ := proto.Marshal(events[0])
	if err := proto.Unmarshal(wire, decoded); err != nil {
		t.Fatal(err)
	}
	if c.Held(decoded) {
		t.Fatal("an event never asked for is held")
	}
	c.Remember(decoded, wire)
	if !c.Held(decoded) {
		t.Fatal("a remembered encoding is not held")
	}
	got, err := c.Get(decoded)
	if err != nil || &got[0] != &wire[0] || marshals != 0 {
		t.Fatalf("Get after Remember: %d marshals, err %v, same bytes %v", marshals, err, err == nil && &got[0] == &wire[0])
	}
	if n, size := c.Len(); n != 1 || size != len(wire) {
		t.Fatalf("%d entries of %d bytes, want 1 of %d", n, size, len(wire))
	}

	// An event marshalled already keeps its encoding.
	first, err := c.Get(events[1])
	if err != nil || marshals != 1 {
		t.Fatalf("%d marshals, err %v", marshals, err)
	}
	c.Remember(events[1], []byte("other"))
	if again, _ := c.Get(events[1]); &again[0] != &first[0] || marshals != 1 {
		t.Fatal("Remember replaced an encoding the cache had")
	}
}

// Everyone who asks for an event's encoding gets the same bytes,
// marshalled once, even when they ask at the same time.
func TestMarshalsAnEventOnce(t *testing.T) {
	c := New(DefaultEntries, DefaultBytes, proto.Marshal)
	ev := testEvents(t)[2]
	var wg sync.WaitGroup
	wires := make([][]byte, 64)
	for i := range wires {
		wg.Go(func() {
			w, err := c.Get(ev)
			if err != nil {
				t.Error(err)
			}
			wires[i] = w
		})
	}
	wg.Wait()
	for _, w := range wires {
		if &w[0] != &wires[0][0] {
			t.Fatal("an event was marshalled more than once")
		}
	}
	if n, _ := c.Len(); n != 1 {
		t.Fatalf("%d entries for one event", n)
	}
}

// The cache keeps at most its number of entries and of bytes, the newest;
// an event that left it is marshalled again.
func TestIsBounded(t *testing.T) {
	const entries, maxBytes = 8, 4096
	cache := New(entries, maxBytes, proto.Marshal)
	event := func(i, size int) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Seq: uint64(i), Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: strings.Repeat("x", size)}}}}}}
	}
	check := func(ev *acpv2.SessionEvent) {
		t.Helper()
		got, err := cache.Get(ev)
		want, _ := proto.Marshal(ev)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("event %d: %x, err %v", ev.GetSeq(), got, err)
		}
	}
	var small []*acpv2.SessionEvent
	for i := range 100 {
		small = append(small, event(i, 10))
		check(small[i])
		if n, b := cache.Len(); n > entries || b > maxBytes {
			t.Fatalf("after %d events: %d entries, %d bytes", i+1, n, b)
		}
	}
	// The newest are kept: the same encoding comes back.
	last := small[len(small)-1]
	w1, _ := cache.Get(last)
	w2, _ := cache.Get(last)
	if &w1[0] != &w2[0] {
		t.Fatal("the newest event was not kept")
	}
	check(small[0]) // long evicted: marshalled again
	for i := range 20 {
		check(event(1000+i, 1000))
		if n, b := cache.Len(); n > entries || b > maxBytes {
			t.Fatalf("large events: %d entries, %d bytes", n, b)
		}
	}
	// An event larger than the whole cache is encoded, not kept.
	check(event(2000, 2*maxBytes))
	if _, b := cache.Len(); b > maxBytes {
		t.Fatalf("%d bytes kept", b)
	}
	// Nothing evicted stays reachable from the cache.
	cache.mu.Lock()
	defer cache.mu.Unlock()
	held := 0
	for _, e := range cache.order {
		if e != nil {
			held++
			if cache.m[e.addr] != e {
				t.Fatal("an evicted entry is still held")
			}
		}
	}
	if held != len(cache.m) {
		t.Fatalf("%d entries held, %d in the map", held, len(cache.m))
	}
}

// An encoding nobody asked for during a whole tick is let go, and the
// expiry timer stops once nothing is held; one asked for again is kept.
func TestUnusedEncodingsExpire(t *testing.T) {
	c := New(DefaultEntries, DefaultBytes, proto.Marshal)
	events := testEvents(t)
	quiet, busy := events[0], events[1]
	for _, ev := range []*acpv2.SessionEvent{quiet, busy} {
		if _, err := c.Get(ev); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	armed := c.timer != nil
	c.mu.Unlock()
	if !armed {
		t.Fatal("entries are held with no expiry timer")
	}
	c.expire() // a tick: both were asked for during it
	if !c.Held(quiet) || !c.Held(busy) {
		t.Fatal("an encoding asked for during the last tick was let go")
	}
	if _, err := c.Get(busy); err != nil {
		t.Fatal(err)
	}
	c.expire() // quiet was not asked for during this tick
	if c.Held(quiet) || !c.Held(busy) {
		t.Fatalf("after a quiet tick: quiet held %v (want false), busy held %v (want true)", c.Held(quiet), c.Held(busy))
	}
	c.expire()
	if n, size := c.Len(); n != 0 || size != 0 {
		t.Fatalf("after two quiet ticks: %d entries, %d bytes", n, size)
	}
	c.mu.Lock()
	armed = c.timer != nil
	c.mu.Unlock()
	if armed {
		t.Fatal("the expiry timer runs with nothing held")
	}
}

// The expiry timer lets go of everything once nobody asks, on its own.
func TestExpiryRunsOnItsOwn(t *testing.T) {
	c := New(DefaultEntries, DefaultBytes, proto.Marshal)
	if _, err := c.Get(testEvents(t)[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * Expiry)
	for n, _ := c.Len(); n != 0; n, _ = c.Len() {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries still held after %v", n, 10*Expiry)
		}
		time.Sleep(Expiry / 10)
	}
}

// An entry left by an event freed since is not taken for the event that
// has its address now.
func TestTellsEventsAtOneAddress(t *testing.T) {
	cache := New(8, 1<<20, proto.Marshal)
	events := testEvents(t)
	a, b := events[0], events[3]
	if _, err := cache.Get(a); err != nil {
		t.Fatal(err)
	}
	// As if a had been freed and b allocated where it was.
	cache.mu.Lock()
	e := cache.m[uintptr(unsafe.Pointer(a))]
	delete(cache.m, e.addr)
	e.addr = uintptr(unsafe.Pointer(b))
	cache.m[e.addr] = e
	cache.mu.Unlock()
	got, err := cache.Get(b)
	want, _ := proto.Marshal(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("b got %x, want its own encoding %x", got, want)
	}
	if n, _ := cache.Len(); n != 1 {
		t.Fatalf("%d entries, want b's alone", n)
	}
}

// The encoding of an event freed since goes at the next tick, without
// waiting for a whole quiet one.
func TestFreedEventsGoAtTheNextTick(t *testing.T) {
	c := New(DefaultEntries, DefaultBytes, proto.Marshal)
	ev := testEvents(t)[2]
	if _, err := c.Get(ev); err != nil {
		t.Fatal(err)
	}
	gone := weak.Make(ev)
	ev = nil //nolint:ineffassign // the event must be unreachable but for the cache
	for i := 0; gone.Value() != nil; i++ {
		if i == 10 {
			t.Fatal("an event only the cache knows is still alive")
		}
		runtime.GC()
	}
	c.expire()
	if n, size := c.Len(); n != 0 || size != 0 {
		t.Fatalf("%d entries, %d bytes held for a freed event", n, size)
	}
}

// An event's encoding made from its body is proto.Marshal's, for every
// kind of event, with and without seq and time; made in the room before
// the body, it is the same bytes, in the body's buffer.
func TestWithBodyIsProtoMarshal(t *testing.T) {
	times := []*timestamppb.Timestamp{nil, {}, {Seconds: 1712345678, Nanos: 901234567}, {Seconds: -62135596800}, {Nanos: 1}}
	for i, base := range testEvents(t)[:4] {
		for j, tm := range times {
			for _, seq := range []uint64{0, 1, 1 << 40} {
				ev := proto.Clone(base).(*acpv2.SessionEvent)
				ev.Seq, ev.Time = seq, tm
				m := ev.ProtoReflect()
				fd := m.WhichOneof(eventOneof)
				body, err := proto.Marshal(m.Get(fd).Message().Interface())
				if err != nil {
					t.Fatal(err)
				}
				got, ok := WithBody(ev, fd.Number(), body)
				if !ok {
					t.Fatalf("event %d, time %d, seq %d: no encoding made", i, j, seq)
				}
				back := &acpv2.SessionEvent{}
				if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, ev) {
					t.Fatalf("event %d, time %d, seq %d: decodes to %v (%v), want %v", i, j, seq, back, err, ev)
				}
				if strings.Contains(protojson.Format(ev), "rawInput") || strings.Contains(protojson.Format(ev), "meta") {
					continue // maps: proto.Marshal's order is random
				}
				if want, _ := proto.Marshal(ev); !bytes.Equal(got, want) {
					t.Fatalf("event %d, time %d, seq %d: %x, proto.Marshal gives %x", i, j, seq, got, want)
				}
				// The same from the room before the body, in place.
				buf := append(make([]byte, Headroom), body...)
				inPlace, ok := WithBodyIn(ev, fd.Number(), buf)
				if !ok || !bytes.Equal(inPlace, got) || &inPlace[len(inPlace)-1] != &buf[len(buf)-1] {
					t.Fatalf("event %d, time %d, seq %d: in place %x, want %x in buf", i, j, seq, inPlace, got)
				}
			}
		}
	}
	// An event with unknown fields is left to a marshal.
	ev := proto.Clone(testEvents(t)[3]).(*acpv2.SessionEvent)
	ev.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	if _, ok := WithBody(ev, 1, []byte{}); ok {
		t.Fatal("an event with unknown fields was given an encoding without them")
	}
	if _, ok := WithBodyIn(ev, 1, make([]byte, Headroom)); ok {
		t.Fatal("an event with unknown fields was given an encoding without them, in place")
	}
}

// eventOneof is SessionEvent's oneof of event kinds.
var eventOneof = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")

// Unmarshal decodes an event and leaves its bytes as its encoding; bytes
// that do not decode give an error.
func TestUnmarshalRemembers(t *testing.T) {
	wire, err := proto.Marshal(testEvents(t)[2])
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Unmarshal(wire)
	if err != nil || !proto.Equal(ev, testEvents(t)[2]) {
		t.Fatalf("decoded %v, %v", ev, err)
	}
	if got, _ := Proto.Get(ev); !Proto.Held(ev) || &got[0] != &wire[0] {
		t.Fatal("the decoded bytes are not the event's encoding")
	}
	if _, err := Unmarshal([]byte{0xff}); err == nil {
		t.Fatal("a malformed encoding decoded")
	}
}
