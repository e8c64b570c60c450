package encoded_test

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
		t.Fatalf("%s (internal/encoded/call.go, encodeCall) loses %v of %v (%v): encode the field there",
			how, protofill.Lost(call, back), call, err)
	}
}

// Calls.Body, which lists a tool call's fields by hand, keeps every field:
// for tool calls that set each field the descriptors name, and for the
// merged calls of updates that do, encoded from the updates' parts, each
// also as the version after one encoded before. A field added to the
// proto fails here until call.go encodes it.
func TestCallsKeepEveryField(t *testing.T) {
	t.Parallel()
	for _, v := range protofill.Variants(&acpv2.ToolCall{}) {
		call := v.(*acpv2.ToolCall)
		if call.ToolCallId == "" {
			call.ToolCallId = "c" // calls are kept by id
		}
		c := &encoded.Calls{}
		keepsCall(t, "Body", call, c.Body(call, nil).Bytes())
		next, err := merge.Restore([]*acpv2.ToolCall{call}).ApplyUpdate(&acpv2.ToolCallUpdate{
			ToolCallId: call.ToolCallId, Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "again"}}})
		if err != nil {
			t.Fatal(err)
		}
		keepsCall(t, "Body of the next version", next, c.Body(next, nil).Bytes())
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
		keepsCall(t, "Body with an update's parts", call, new(encoded.Calls).Body(call, encoded.UpdateParts(u, uw)).Bytes())
	}
}
