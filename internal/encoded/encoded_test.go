package encoded

import (
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

func kindOfEvent(t *testing.T, ev *acpv2.SessionEvent) Kind {
	t.Helper()
	fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return 0
	}
	return Kind(fd.Number())
}

func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// An event read back from its bytes has the seq and kind of the one
// encoded, hands out those very bytes, and decodes, when asked, to the
// message encoded.
func TestDecode(t *testing.T) {
	t.Parallel()
	for _, ev := range testEvents(t) {
		wire, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Decode(wire)
		if err != nil {
			t.Fatalf("Decode(event %d): %v", ev.GetSeq(), err)
		}
		if e.Seq() != ev.GetSeq() || e.Kind() != kindOfEvent(t, ev) {
			t.Errorf("event %d: Seq, Kind = %d, %v; want %d, %v", ev.GetSeq(), e.Seq(), e.Kind(), ev.GetSeq(), kindOfEvent(t, ev))
		}
		if !same(e.Proto(), wire) || e.Size() != len(wire) {
			t.Errorf("event %d: Proto is not the bytes decoded", ev.GetSeq())
		}
		msg, err := e.Message()
		if err != nil || !proto.Equal(msg, ev) {
			t.Errorf("event %d: Message = %v, %v; want %v", ev.GetSeq(), msg, err, ev)
		}
		again, _ := e.Message()
		if again != msg {
			t.Errorf("event %d: Message decoded twice", ev.GetSeq())
		}
	}
}

// An event made from its message encodes it as proto.Marshal does and
// gives that message back, not a copy.
func TestNewAndOf(t *testing.T) {
	t.Parallel()
	for _, ev := range testEvents(t) {
		e, err := New(ev)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(ev)
		var got acpv2.SessionEvent
		if err := proto.Unmarshal(e.Proto(), &got); err != nil || !proto.Equal(&got, ev) {
			t.Errorf("event %d: New's encoding decodes to %v, %v", ev.GetSeq(), &got, err)
		}
		if e.Seq() != ev.GetSeq() || e.Kind() != kindOfEvent(t, ev) {
			t.Errorf("event %d: Seq, Kind = %d, %v", ev.GetSeq(), e.Seq(), e.Kind())
		}
		if msg, err := e.Message(); msg != ev || err != nil {
			t.Errorf("event %d: Message is not the event's message", ev.GetSeq())
		}
		o := Of(ev, want)
		if !same(o.Proto(), want) || o.Seq() != ev.GetSeq() || o.Kind() != e.Kind() {
			t.Errorf("event %d: Of does not keep the encoding given", ev.GetSeq())
		}
	}
	bad := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "\xff"}}}
	if _, err := New(bad); err == nil {
		t.Error("New of an event that does not encode succeeded")
	}
}

// The JSON of an event is made once, however many streams ask at the
// same time, and is protojson's, member by member.
func TestJSONMadeOnce(t *testing.T) {
	t.Parallel()
	for _, ev := range testEvents(t) {
		wire, _ := proto.Marshal(ev)
		for name, e := range map[string]*Event{"decoded": must(Decode(wire)), "of": Of(ev, wire)} {
			const streams = 8
			var wg sync.WaitGroup
			got := make([][]byte, streams)
			for i := range streams {
				wg.Go(func() {
					b, err := e.JSON()
					if err != nil {
						t.Error(err)
					}
					got[i] = b
				})
			}
			wg.Wait()
			for i := range got {
				if !same(got[i], got[0]) {
					t.Fatalf("%s event %d: JSON made more than once", name, ev.GetSeq())
				}
			}
			want, _ := protojson.Marshal(ev)
			var a, b any
			if json.Unmarshal(got[0], &a) != nil || json.Unmarshal(want, &b) != nil || !reflect.DeepEqual(a, b) {
				t.Errorf("%s event %d: JSON = %s, want %s", name, ev.GetSeq(), got[0], want)
			}
		}
	}
}

func must(e *Event, err error) *Event {
	if err != nil {
		panic(err)
	}
	return e
}

// Malformed bytes are refused at once where their fields do not parse,
// and otherwise when the message is asked for.
func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	if _, err := Decode([]byte{0xff, 0xff}); err == nil {
		t.Error("Decode of bytes whose fields do not parse succeeded")
	}
	// A tool call whose contents are not a message.
	wire := protowire.AppendTag(nil, 1, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 7)
	wire = protowire.AppendTag(wire, protowire.Number(ToolCall), protowire.BytesType)
	wire = protowire.AppendBytes(wire, []byte{0xff, 0xff})
	e, err := Decode(wire)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if e.Seq() != 7 || e.Kind() != ToolCall {
		t.Errorf("Seq, Kind = %d, %v", e.Seq(), e.Kind())
	}
	if _, err := e.Message(); err == nil {
		t.Error("Message of a malformed tool call succeeded")
	}
	if _, err := e.JSON(); err == nil {
		t.Error("JSON of a malformed tool call succeeded")
	}
}

// A merged call's event gives the call's encoding from within its own,
// without a copy; an event of another kind gives none.
func TestField(t *testing.T) {
	t.Parallel()
	events := testEvents(t)
	call := events[2]
	wire, _ := proto.Marshal(call)
	e := must(Decode(wire))
	got := e.Field(ToolCall)
	var tc acpv2.ToolCall
	if err := proto.Unmarshal(got, &tc); err != nil || !proto.Equal(&tc, call.GetToolCall()) {
		t.Fatalf("Field(ToolCall) decodes to %v, %v", &tc, err)
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(wire)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(got)))
	if at < start || at+uintptr(len(got)) > start+uintptr(len(wire)) {
		t.Error("Field(ToolCall) is a copy")
	}
	if e.Field(Snapshot) != nil || e.Field(0) != nil {
		t.Error("Field of another kind is not nil")
	}
	if b := must(New(events[0])).Field(ToolCall); b != nil {
		t.Errorf("a chunk's Field(ToolCall) = %x", b)
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[Kind]string{ToolCall: "tool_call", TurnEnded: "turn_ended", Snapshot: "snapshot", 9999: "event field 9999"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
