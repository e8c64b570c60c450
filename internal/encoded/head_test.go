package encoded

import (
	"bytes"
	"strings"
	"testing"

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
		`{"seq":"5"}`,
	} {
		ev := &acpv2.SessionEvent{}
		if err := protojson.Unmarshal([]byte(js), ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		events = append(events, ev)
	}
	return events
}

// An event's encoding made from its body is proto.Marshal's, for every
// kind of event, with and without seq and time; made in the room before
// the body, it is the same bytes, in the body's buffer.
func TestHeadIsProtoMarshal(t *testing.T) {
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
				got, ok := withBody(ev, fd.Number(), body)
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
				buf := append(make([]byte, headroom), body...)
				inPlace, ok := withBodyIn(ev, fd.Number(), buf)
				if !ok || !bytes.Equal(inPlace, got) || &inPlace[len(inPlace)-1] != &buf[len(buf)-1] {
					t.Fatalf("event %d, time %d, seq %d: in place %x, want %x in buf", i, j, seq, inPlace, got)
				}
			}
		}
	}
	// An event with unknown fields is left to a marshal.
	ev := proto.Clone(testEvents(t)[3]).(*acpv2.SessionEvent)
	ev.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	if _, ok := withBody(ev, 1, []byte{}); ok {
		t.Fatal("an event with unknown fields was given an encoding without them")
	}
	if _, ok := withBodyIn(ev, 1, make([]byte, headroom)); ok {
		t.Fatal("an event with unknown fields was given an encoding without them, in place")
	}
}
