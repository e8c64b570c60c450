package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
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

// replyOf returns m as a stream sends it: an encoded.Reply with its event
// encoded by marshal, for a response with one; else m.
func replyOf(t *testing.T, m proto.Message, marshal func(proto.Message) ([]byte, error)) any {
	t.Helper()
	r, ok := m.(interface{ GetEvent() *acpv2.SessionEvent })
	if !ok || r.GetEvent() == nil {
		return m
	}
	wire, err := marshal(r.GetEvent())
	if err != nil {
		t.Fatal(err)
	}
	return &encoded.Reply{Message: m, Event: encoded.Of(r.GetEvent(), wire)}
}

// The codec's output is proto.Marshal's, for the responses it writes
// from their encoded event and for the others. proto.Marshal writes map
// entries in random order, so messages with maps are compared with
// events marshalled with map entries in key order.
func TestCodecOutputIsProtoMarshal(t *testing.T) {
	c := newProtoCodec()
	det := proto.MarshalOptions{Deterministic: true}
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
	for round := range 2 { // the first as messages, the second as Replies
		for i, m := range msgs {
			want, err := det.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			sent, detSent := any(m), any(m)
			if round == 1 {
				sent, detSent = replyOf(t, m, proto.Marshal), replyOf(t, m, det.Marshal)
			}
			maps := strings.Contains(protojson.Format(m), `"meta"`) || strings.Contains(protojson.Format(m), `"rawInput"`)
			got, err := c.Marshal(detSent)
			if err != nil || (round == 1 || !maps) && !bytes.Equal(got, want) {
				t.Fatalf("round %d, message %d (%T): codec gives %x (err %v), proto.Marshal %x", round, i, m, got, err, want)
			}
			if got, err := c.Marshal(sent); err != nil || len(got) != proto.Size(m) {
				t.Fatalf("round %d, message %d: %d bytes (err %v), want %d", round, i, len(got), err, proto.Size(m))
			}
			prefix := []byte("prefix")
			got, err = c.MarshalAppend(prefix, detSent)
			if err != nil || (round == 1 || !maps) && !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("round %d, message %d: MarshalAppend lost its prefix or differs", round, i)
			}
			// The gateway's codec: its output decodes to the message, and
			// is proto.Marshal's where that does not depend on map order.
			got, err = c.MarshalAppend(prefix, sent)
			if err != nil || !bytes.Equal(got[:len(prefix)], prefix) {
				t.Fatalf("round %d, message %d: MarshalAppend lost its prefix: %v", round, i, err)
			}
			back := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(got[len(prefix):], back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("round %d, message %d: does not decode to itself: %v", round, i, err)
			}
			if maps {
				continue // proto.Marshal's order is random
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

// The JSON codec's output is protojson.Marshal's without its spaces
// (protojson varies its spacing from build to build), and
// it reads what connect's reads.
func TestJSONCodecOutputIsProtojson(t *testing.T) {
	c := newJSONCodec()
	var msgs []proto.Message
	for _, ev := range testEvents(t) {
		msgs = append(msgs, &acpv2.PromptResponse{Event: ev}, &acpv2.WatchResponse{Event: ev})
	}
	hb := timestamppb.Now()
	msgs = append(msgs, &acpv2.WatchResponse{Heartbeat: hb}, &acpv2.PromptResponse{Event: testEvents(t)[0], Heartbeat: hb},
		&acpv2.WatchResponse{}, &acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{SessionId: "s", LastSeq: 7}})
	for round := range 2 { // the first as messages, the second as Replies
		for i, m := range msgs {
			want, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			sent := any(m)
			if round == 1 {
				sent = replyOf(t, m, proto.Marshal)
			}
			got, err := c.MarshalAppend([]byte("prefix"), sent)
			if err != nil || !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("round %d, message %d (%T): codec gives %s (err %v)", round, i, m, got, err)
			}
			// The same bytes once protojson's spaces are taken out.
			var compacted bytes.Buffer
			if err := json.Compact(&compacted, want); err != nil || !bytes.Equal(got[len("prefix"):], compacted.Bytes()) {
				t.Fatalf("round %d, message %d (%T): codec gives %s, protojson %s", round, i, m, got[len("prefix"):], want)
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
	// It writes with eventjson, not protojson: a snapshot of tool calls
	// with Struct values takes protojson dozens of allocations, eventjson
	// none into a buffer with room (a few with the race detector, whose
	// sync.Pool drops pooled encoders at random). Each count is checked
	// against protojson's for the same work, so that the check holds in
	// either build and fails when the codec falls back to protojson.
	snap := &acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{SessionId: "s"}}
	for _, ev := range testEvents(t) {
		if tc := ev.GetToolCall(); tc != nil {
			snap.Session.ToolCalls = append(snap.Session.ToolCalls, tc, tc)
		}
	}
	buf := make([]byte, 0, 64<<10)
	pj := testing.AllocsPerRun(20, func() { _, _ = protojson.MarshalOptions{}.MarshalAppend(buf[:0], snap) })
	if n := testing.AllocsPerRun(20, func() { _, _ = c.MarshalAppend(buf[:0], snap) }); n > pj/8 {
		t.Fatalf("the JSON codec made %v allocations for a snapshot, protojson %v: it does not write with eventjson", n, pj)
	}
	// The same for events, each new and its JSON made once: a tool
	// call's event took 67 allocations with protojson, 3 with eventjson,
	// when measured.
	const runs = 20
	fresh := func() []any {
		var resps []any
		for range runs + 1 { // AllocsPerRun calls once more to warm up
			resps = append(resps, replyOf(t, &acpv2.WatchResponse{Event: proto.Clone(testEvents(t)[2]).(*acpv2.SessionEvent)}, proto.Marshal))
		}
		return resps
	}
	resps, next := fresh(), 0
	pj = testing.AllocsPerRun(runs, func() {
		_, _ = protojson.MarshalOptions{}.MarshalAppend(buf[:0], resps[next].(*encoded.Reply).Message)
		next++
	})
	resps, next = fresh(), 0
	if n := testing.AllocsPerRun(runs, func() { _, _ = c.MarshalAppend(buf[:0], resps[next]); next++ }); n > pj/4 {
		t.Fatalf("the JSON codec made %v allocations for a new event, protojson %v: it does not marshal events with eventjson", n, pj)
	}
}

// A Reply is written with its event's encoding as given, not marshalled
// again: the given bytes here carry a field the event lacks, which the
// output then holds. A Reply without an event, or whose message is not an
// event alone (a heartbeat), is its message's encoding. The JSON codec
// writes the Reply's event's JSON, made once.
func TestCodecWritesAReplysEncoding(t *testing.T) {
	c, jc := newProtoCodec(), newJSONCodec()
	ev := testEvents(t)[0]
	wire, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	wire = append(wire, 0x98, 0x06, 0x01) // field 99, varint 1
	resp := &acpv2.WatchResponse{Event: ev}
	got, err := c.MarshalAppend([]byte("prefix"), &encoded.Reply{Message: resp, Event: encoded.Of(ev, wire)})
	if err != nil {
		t.Fatal(err)
	}
	back := &acpv2.WatchResponse{}
	if err := c.Unmarshal(got[len("prefix"):], back); err != nil || string(got[:len("prefix")]) != "prefix" {
		t.Fatalf("%x does not decode after its prefix: %v", got, err)
	}
	if u := back.GetEvent().ProtoReflect().GetUnknown(); !bytes.Equal(u, []byte{0x98, 0x06, 0x01}) {
		t.Fatalf("the event was marshalled again, not written as given (unknown fields %x)", u)
	}
	hb := &acpv2.WatchResponse{Event: ev, Heartbeat: timestamppb.Now()}
	for i, r := range []*encoded.Reply{{Message: resp}, {Message: hb, Event: encoded.Of(ev, wire)}} {
		got, err := c.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back := &acpv2.WatchResponse{}
		if err := c.Unmarshal(got, back); err != nil || !proto.Equal(back, r.Message) {
			t.Fatalf("reply %d decodes to %v (%v), want %v", i, back, err, r.Message)
		}
	}
	// The JSON is the Reply's event's (here another event than the
	// message's, to tell), the same bytes for every stream.
	other := testEvents(t)[1]
	e := encoded.Of(other, nil)
	first, err := jc.Marshal(&encoded.Reply{Message: resp, Event: e})
	if err != nil {
		t.Fatalf("JSON codec: %v", err)
	}
	want, _ := protojson.Marshal(&acpv2.WatchResponse{Event: other})
	testutil.SameJSON(t, first, want)
	js, _ := e.JSON()
	second, _ := jc.MarshalAppend(nil, &encoded.Reply{Message: resp, Event: e})
	if !bytes.Equal(first, second) || !bytes.Contains(first, js) {
		t.Fatalf("the JSON codec wrote %s then %s, not the event's JSON %s", first, second, js)
	}
}
