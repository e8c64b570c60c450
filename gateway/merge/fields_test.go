package merge_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// keepsCall fails unless wire decodes to call.
func keepsCall(t *testing.T, how string, call *acpv2.ToolCall, wire []byte) {
	t.Helper()
	back := &acpv2.ToolCall{}
	if err := proto.Unmarshal(wire, back); err != nil || !proto.Equal(back, call) {
		t.Fatalf("%s (gateway/merge/wire.go, encodeCall) loses %v of %v (%v): encode the field there",
			how, protofill.Lost(call, back), call, err)
	}
}

// Wire and WireRoom, which list a tool call's fields by hand, keep every
// field: for tool calls that set each field the descriptors name, and for
// the merged calls of updates that do, encoded from the updates' parts. A
// field added to the proto fails here until wire.go encodes it.
func TestWireKeepsEveryField(t *testing.T) {
	t.Parallel()
	for _, v := range protofill.Variants(&acpv2.ToolCall{}) {
		call := v.(*acpv2.ToolCall)
		if call.ToolCallId == "" {
			call.ToolCallId = "c" // the State keeps calls by id
		}
		wire, err := merge.Restore([]*acpv2.ToolCall{call}).Wire(call, nil)
		if err != nil {
			t.Fatal(err)
		}
		keepsCall(t, "Wire", call, wire)
		if b, ok := merge.Restore([]*acpv2.ToolCall{call}).WireRoom(call, nil, encoded.Headroom); ok {
			keepsCall(t, "WireRoom", call, b[encoded.Headroom:])
		}
	}
	for _, v := range protofill.Variants(&acpv2.ToolCallUpdate{}) {
		u := v.(*acpv2.ToolCallUpdate)
		if u.ToolCallId == "" {
			u.ToolCallId = "c"
		}
		s := merge.New()
		call, err := s.ApplyUpdate(u)
		if err != nil {
			t.Fatal(err)
		}
		uw, err := proto.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		wire, err := s.Wire(call, merge.UpdateParts(u, uw))
		if err != nil {
			t.Fatal(err)
		}
		keepsCall(t, "Wire with an update's parts", call, wire)
	}
}
