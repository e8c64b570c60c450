package session

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// bodyCases are update messages of the kinds appendUpdate encodes itself,
// in their usual shapes and their odd ones.
func bodyCases(t *testing.T) []proto.Message {
	t.Helper()
	var out []proto.Message
	for _, js := range []string{
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":"Edit","kind":"edit","status":"pending","locations":[{"path":"/p","line":4}],"rawInput":{"file":"/p","n":[1,2,{"x":null}]},"_meta":{"bench":{"n":1,"t":"17"}}}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":null,"kind":null,"status":null,"content":null,"locations":null,"rawInput":null,"rawOutput":null,"_meta":null}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","content":[{"type":"diff","path":"/p","oldText":"a","newText":"b"}],"rawOutput":"done","extraMember":{"k":true}}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":7}`,
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":"x","_meta":{"a":1}}},"_meta":{"b":{"c":[]}}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"messageId":"","_meta":{"bench":{"n":2}}}`,
		`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"},"other":[1]}`,
	} {
		u, err := acpjson.DecodeUpdate([]byte(js), acpjson.V2)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		m := u.ProtoReflect()
		out = append(out, m.Get(m.WhichOneof(updateOneof)).Message().Interface())
	}
	null := structpb.NullValue_NULL_VALUE
	out = append(out,
		&acpv2.ToolCallUpdate{ToolCallId: "c", Title: &acpv2.StringPatch{}, RawInput: &acpv2.ValuePatch{}, Meta: &acpv2.StructPatch{}},
		&acpv2.ToolCallUpdate{ToolCallId: "c", RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Clear{Clear: null}},
			Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Clear{Clear: structpb.NullValue(3)}}},
		&acpv2.ToolCallContentChunk{ToolCallId: "c"},
		&acpv2.ContentChunk{},
	)
	return out
}

// appendUpdate's encoding of an update decodes to it, and is proto.Marshal's
// where map order does not enter.
func TestUpdateBodyIsProtoMarshal(t *testing.T) {
	for i, m := range bodyCases(t) {
		got, err := appendUpdate([]byte("prefix"), m)
		if err != nil || !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatalf("case %d: %v", i, err)
		}
		got = got[len("prefix"):]
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("case %d (%T): decodes to %v (%v), want %v", i, m, back, err, m)
		}
		if manyEntries(m.ProtoReflect()) {
			continue // maps of several members: proto.Marshal's order is random
		}
		if want, _ := proto.Marshal(m); !bytes.Equal(got, want) {
			t.Fatalf("case %d (%T): %x, proto.Marshal %x", i, m, got, want)
		}
	}
}

// What proto.Marshal refuses, appendUpdate refuses; what it does not
// encode itself it leaves to proto.Marshal.
func TestUpdateBodyRefusals(t *testing.T) {
	if _, err := appendUpdate(nil, &acpv2.ToolCallUpdate{ToolCallId: "bad \xff"}); err == nil {
		t.Fatal("an invalid UTF-8 id encoded")
	}
	bad := &acpv2.ContentChunk{Meta: &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("\xff")}}}
	if _, err := appendUpdate(nil, bad); err == nil {
		t.Fatal("an invalid UTF-8 _meta value encoded")
	}
	odd := &acpv2.ToolCallContentChunk{ToolCallId: "c", Meta: &structpb.Struct{Fields: map[string]*structpb.Value{"k": nil}}}
	got, err := appendUpdate(nil, odd)
	want, werr := proto.Marshal(odd)
	if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("a nil Struct value: %x (%v), proto.Marshal %x (%v)", got, err, want, werr)
	}
	unknown := &acpv2.ToolCallUpdate{ToolCallId: "c"}
	unknown.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	if got, err := appendUpdate(nil, unknown); err != nil || !bytes.HasSuffix(got, []byte{0x98, 0x06, 0x01}) {
		t.Fatalf("unknown fields: %x, %v", got, err)
	}
}

// manyEntries reports whether m holds a map of more than one entry.
func manyEntries(m protoreflect.Message) bool {
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			found = v.Map().Len() > 1
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				found = found || fd.MapValue().Message() != nil && manyEntries(e.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = found || manyEntries(v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			found = manyEntries(v.Message())
		}
		return !found
	})
	return found
}
