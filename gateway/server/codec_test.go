package server

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// testEvents are events of many kinds, with Struct values of several keys
// (whose map order proto.Marshal does not fix) and without.
func testEvents(t *testing.T) []*acpv2.SessionEvent {
	t.Helper()
	var events []*acpv2.SessionEvent
	for i, js := range []string{
		`{"seq":"1","time":"2026-01-02T03:04:05.678Z","agentMessageChunk":{"content":{"text":{"text":"hello"}}}}`,
		`{"seq":"2","agentMessageChunk":{"content":{"text":{"text":"x","meta":{"b":1,"a":[true,null,"s"],"c":{"z":1,"y":2}}}},"meta":{"k":"v","j":2}}}`,
		`{"seq":"3","toolCall":{"toolCallId":"t1","title":"Run","kind":"execute","status":"in_progress","rawInput":{"cmd":"go test","args":["-race","./..."],"env":{"A":"1","B":"2","C":"3"}},"meta":{"m":1,"n":2}}}`,
		`{"seq":"4","turnEnded":{"stopReason":"end_turn"}}`,
		`{"seq":"5","stateChanged":{"state":"ready","detail":"d"}}`,
		`{"seq":"6"}`,
		`{"seq":"7","agentMessageChunk":{"content":{"text":{"text":"` + strings.Repeat("long ", 5000) + `"}}}}`,
	} {
		ev := &acpv2.SessionEvent{}
		if err := protojson.Unmarshal([]byte(js), ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		events = append(events, ev)
	}
	return events
}

// The codec's output is proto.Marshal's, for the responses it encodes
// from a cached event and for the others. proto.Marshal writes map
// entries in random order, so messages with maps are compared with a
// codec whose events are marshalled with map entries in key order; the
// others with the gateway's.
func TestCodecOutputIsProtoMarshal(t *testing.T) {
	c := newProtoCodec()
	det := proto.MarshalOptions{Deterministic: true}
	detCodec := &protoCodec{events: newEventCache(cacheEntries, cacheBytes, det.Marshal)}
	var msgs []proto.Message
	for _, ev := range testEvents(t) {
		msgs = append(msgs, &acpv2.PromptResponse{Event: ev}, &acpv2.WatchResponse{Event: ev})
	}
	hb := timestamppb.Now()
	withUnknown := &acpv2.WatchResponse{Event: testEvents(t)[0]}
	withUnknown.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01}) // field 99, varint 1
	msgs = append(msgs,
		&acpv2.PromptResponse{Heartbeat: hb}, &acpv2.WatchResponse{Heartbeat: hb},
		&acpv2.WatchResponse{Event: testEvents(t)[0], Heartbeat: hb},
		&acpv2.WatchResponse{}, withUnknown,
		&acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{SessionId: "s", LastSeq: 7}},
	)
	for round := range 2 { // the second from the cache
		for i, m := range msgs {
			want, err := det.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := detCodec.Marshal(m)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("round %d, message %d (%T): codec gives %x (err %v), proto.Marshal %x", round, i, m, got, err, want)
			}
			if got, err := c.Marshal(m); err != nil || len(got) != proto.Size(m) {
				t.Fatalf("round %d, message %d: %d bytes (err %v), want %d", round, i, len(got), err, proto.Size(m))
			}
			prefix := []byte("prefix")
			got, err = detCodec.MarshalAppend(prefix, m)
			if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("round %d, message %d: MarshalAppend lost its prefix or differs", round, i)
			}
			// The gateway's codec: its output decodes to the message, and
			// is proto.Marshal's where that does not depend on map order.
			got, err = c.MarshalAppend(prefix, m)
			if err != nil || !bytes.Equal(got[:len(prefix)], prefix) {
				t.Fatalf("round %d, message %d: MarshalAppend lost its prefix: %v", round, i, err)
			}
			back := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(got[len(prefix):], back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("round %d, message %d: does not decode to itself: %v", round, i, err)
			}
			if strings.Contains(protojson.Format(m), `"meta"`) || strings.Contains(protojson.Format(m), `"rawInput"`) {
				continue // maps: proto.Marshal's order is random
			}
			if plain, _ := proto.Marshal(m); !bytes.Equal(got[len(prefix):], plain) {
				t.Fatalf("round %d, message %d: differs from proto.Marshal", round, i)
			}
		}
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Fatal("a non-message marshalled")
	}
	if !c.IsBinary() || c.Name() != "proto" {
		t.Fatal("the codec is not connect's proto codec")
	}
}

// The JSON codec's output is protojson.Marshal's, byte for byte, and it
// reads what connect's reads.
func TestJSONCodecOutputIsProtojson(t *testing.T) {
	c := newJSONCodec()
	var msgs []proto.Message
	for _, ev := range testEvents(t) {
		msgs = append(msgs, &acpv2.PromptResponse{Event: ev}, &acpv2.WatchResponse{Event: ev})
	}
	hb := timestamppb.Now()
	msgs = append(msgs, &acpv2.WatchResponse{Heartbeat: hb}, &acpv2.PromptResponse{Event: testEvents(t)[0], Heartbeat: hb},
		&acpv2.WatchResponse{}, &acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{SessionId: "s", LastSeq: 7}})
	for round := range 2 { // the second from the cache
		for i, m := range msgs {
			want, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.MarshalAppend([]byte("prefix"), m)
			if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("round %d, message %d (%T): codec gives %s (err %v), protojson %s", round, i, m, got, err, want)
			}
			back := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(got[len("prefix"):], back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("round %d, message %d: does not decode to itself: %v", round, i, err)
			}
		}
	}
	var req acpv2.WatchRequest
	if err := c.Unmarshal([]byte(`{"sessionId":"s","newField":1}`), &req); err != nil || req.GetSessionId() != "s" {
		t.Fatalf("unknown fields are not discarded: %v", err)
	}
	if err := c.Unmarshal(nil, &req); err == nil {
		t.Fatal("an empty payload decoded")
	}
	if c.IsBinary() || c.Name() != "json" {
		t.Fatal("the codec is not connect's json codec")
	}
}

// Every stream that sends an event sends the same encoding, marshalled
// once, even when they ask at the same time.
func TestCodecMarshalsAnEventOnce(t *testing.T) {
	c := newProtoCodec()
	ev := testEvents(t)[2]
	var wg sync.WaitGroup
	wires := make([][]byte, 64)
	for i := range wires {
		wg.Go(func() {
			w, err := c.events.get(ev)
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
	if n, _ := c.events.len(); n != 1 {
		t.Fatalf("%d entries for one event", n)
	}
}

// The cache keeps at most its number of entries and of bytes, the newest;
// an event that left it is marshalled again.
func TestCodecCacheIsBounded(t *testing.T) {
	const entries, maxBytes = 8, 4096
	cache := newEventCache(entries, maxBytes, proto.Marshal)
	event := func(i, size int) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Seq: uint64(i), Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: strings.Repeat("x", size)}}}}}}
	}
	check := func(ev *acpv2.SessionEvent) {
		t.Helper()
		got, err := cache.get(ev)
		want, _ := proto.Marshal(ev)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("event %d: %x, err %v", ev.GetSeq(), got, err)
		}
	}
	var small []*acpv2.SessionEvent
	for i := range 100 {
		small = append(small, event(i, 10))
		check(small[i])
		if n, b := cache.len(); n > entries || b > maxBytes {
			t.Fatalf("after %d events: %d entries, %d bytes", i+1, n, b)
		}
	}
	// The newest are kept: the same encoding comes back.
	last := small[len(small)-1]
	w1, _ := cache.get(last)
	w2, _ := cache.get(last)
	if &w1[0] != &w2[0] {
		t.Fatal("the newest event was not kept")
	}
	check(small[0]) // long evicted: marshalled again
	for i := range 20 {
		check(event(1000+i, 1000))
		if n, b := cache.len(); n > entries || b > maxBytes {
			t.Fatalf("large events: %d entries, %d bytes", n, b)
		}
	}
	// An event larger than the whole cache is encoded, not kept.
	check(event(2000, 2*maxBytes))
	if _, b := cache.len(); b > maxBytes {
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

// The cache keeps encodings, not the events: an event nothing else holds
// is freed, and its encoding is then let go too.
func TestCodecCacheDoesNotKeepEvents(t *testing.T) {
	c := newProtoCodec()
	ev := testEvents(t)[2]
	if _, err := c.Marshal(&acpv2.WatchResponse{Event: ev}); err != nil {
		t.Fatal(err)
	}
	freed := make(chan struct{})
	runtime.AddCleanup(ev, func(ch chan struct{}) { close(ch) }, freed)
	ev = nil
	for range 10 {
		runtime.GC()
		select {
		case <-freed:
			for range 100 {
				if n, _ := c.events.len(); n == 0 {
					return
				}
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			n, size := c.events.len()
			t.Fatalf("the freed event's encoding is still cached: %d entries, %d bytes", n, size)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("an event sent once is still alive")
}

// An entry left by an event freed since is not taken for the event that
// has its address now.
func TestCodecCacheTellsEventsAtOneAddress(t *testing.T) {
	cache := newEventCache(8, 1<<20, proto.Marshal)
	events := testEvents(t)
	a, b := events[0], events[3]
	if _, err := cache.get(a); err != nil {
		t.Fatal(err)
	}
	// As if a had been freed and b allocated where it was.
	cache.mu.Lock()
	e := cache.m[uintptr(unsafe.Pointer(a))]
	delete(cache.m, e.addr)
	e.addr = uintptr(unsafe.Pointer(b))
	cache.m[e.addr] = e
	cache.mu.Unlock()
	got, err := cache.get(b)
	want, _ := proto.Marshal(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("b got %x, want its own encoding %x", got, want)
	}
	if n, _ := cache.len(); n != 1 {
		t.Fatalf("%d entries, want b's alone", n)
	}
}
