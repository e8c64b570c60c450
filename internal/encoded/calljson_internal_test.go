package encoded

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The events of a tool call's versions share the JSON of its parts, kept
// by the latest version whose JSON was made, until the call is forgotten:
// the next version's JSON reuses them.
func TestCallEventsShareTheirJSONParts(t *testing.T) {
	t.Parallel()
	c := &Calls{}
	raw := structpb.NewStringValue("input")
	v1 := &acpv2.ToolCall{ToolCallId: "c", Status: "pending", RawInput: raw}
	v2 := &acpv2.ToolCall{ToolCallId: "c", Status: "completed", RawInput: raw}
	event := func(seq uint64, tc *acpv2.ToolCall) *Event {
		evs, _, err := Numbered([]*acpv2.SessionEvent{{Seq: seq, Event: &acpv2.SessionEvent_ToolCall{ToolCall: tc}}},
			[]Body{c.Body(tc, nil)})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0]
	}
	e1, e2 := event(1, v1), event(2, v2)
	if e1.call == nil || e2.call != e1.call {
		t.Fatal("the versions' events do not share the call's JSON parts")
	}
	for _, e := range []*Event{e2, e1} { // the later first: it stays the one kept
		if _, err := e.JSON(); err != nil {
			t.Fatal(err)
		}
	}
	if e1.call.seq != 2 || e1.call.parts.Len() != 1 {
		t.Fatalf("kept the parts of event %d (%d parts), want event 2's rawInput", e1.call.seq, e1.call.parts.Len())
	}
	c.Forget("c")
	if e3 := event(3, v2); e3.call == e1.call {
		t.Fatal("a forgotten call's next event shares its JSON parts")
	}
}
