package merge_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Builders for patch wrappers and content. They keep the tests short.

func strVal(s string) *acpv2.StringPatch {
	return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: s}}
}

func strClear() *acpv2.StringPatch {
	return &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{}}
}

func contentVal(items ...*acpv2.ToolCallContent) *acpv2.ToolCallContentPatch {
	return &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{
		Value: &acpv2.ToolCallContentList{Items: items},
	}}
}

func contentClear() *acpv2.ToolCallContentPatch {
	return &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Clear{}}
}

func locVal(items ...*acpv2.ToolCallLocation) *acpv2.ToolCallLocationPatch {
	return &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{
		Value: &acpv2.ToolCallLocationList{Items: items},
	}}
}

func locClear() *acpv2.ToolCallLocationPatch {
	return &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Clear{}}
}

func valueVal(v *structpb.Value) *acpv2.ValuePatch {
	return &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: v}}
}

func valueClear() *acpv2.ValuePatch {
	return &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Clear{}}
}

func metaVal(s *structpb.Struct) *acpv2.StructPatch {
	return &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: s}}
}

func metaClear() *acpv2.StructPatch {
	return &acpv2.StructPatch{Op: &acpv2.StructPatch_Clear{}}
}

func textItem(s string) *acpv2.ToolCallContent {
	return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{
		Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{
			Text: &acpv2.TextContent{Text: s},
		}},
	}}
}

func diffItem(path, oldText, newText string) *acpv2.ToolCallContent {
	return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{
		Diff: &acpv2.Diff{Path: &path, OldText: &oldText, NewText: &newText},
	}}
}

func terminalItem(id string) *acpv2.ToolCallContent {
	return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{
		Terminal: &acpv2.Terminal{TerminalId: id},
	}}
}

func unknownItem(fields map[string]any) *acpv2.ToolCallContent {
	return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Unknown{
		Unknown: mustStruct(fields),
	}}
}

func loc(path string, line uint32) *acpv2.ToolCallLocation {
	return &acpv2.ToolCallLocation{Path: path, Line: &line}
}

func mustStruct(fields map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return s
}

func mustValue(v any) *structpb.Value {
	x, err := structpb.NewValue(v)
	if err != nil {
		panic(err)
	}
	return x
}

func chunk(id string, item *acpv2.ToolCallContent) *acpv2.ToolCallContentChunk {
	return &acpv2.ToolCallContentChunk{ToolCallId: id, Content: item}
}

// op is one delta of a sequence: exactly one of u and c is set.
type op struct {
	u *acpv2.ToolCallUpdate
	c *acpv2.ToolCallContentChunk
}

func (o op) String() string {
	if o.u != nil {
		return "update " + o.u.String()
	}
	return "chunk " + o.c.String()
}

func upd(u *acpv2.ToolCallUpdate) op       { return op{u: u} }
func chk(c *acpv2.ToolCallContentChunk) op { return op{c: c} }
func chkText(id, text string) op           { return chk(chunk(id, textItem(text))) }

// message returns the update or chunk of o.
func (o op) message() proto.Message {
	if o.u != nil {
		return o.u
	}
	return o.c
}

func equalCalls(a, b []*acpv2.ToolCall) bool { return equalSlices(a, b) }

func equalSlices[M proto.Message](a, b []M) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// apply applies o to s.
func apply(s interface {
	ApplyUpdate(*acpv2.ToolCallUpdate) (*acpv2.ToolCall, error)
	ApplyChunk(*acpv2.ToolCallContentChunk) (*acpv2.ToolCall, error)
}, o op) (*acpv2.ToolCall, error) {
	if o.u != nil {
		return s.ApplyUpdate(o.u)
	}
	return s.ApplyChunk(o.c)
}

// mustApply applies ops in order and fails the test on any error.
func mustApply(t testing.TB, s interface {
	ApplyUpdate(*acpv2.ToolCallUpdate) (*acpv2.ToolCall, error)
	ApplyChunk(*acpv2.ToolCallContentChunk) (*acpv2.ToolCall, error)
}, ops ...op) *acpv2.ToolCall {
	t.Helper()
	var last *acpv2.ToolCall
	for _, o := range ops {
		got, err := apply(s, o)
		if err != nil {
			t.Fatalf("apply %v: %v", o, err)
		}
		last = got
	}
	return last
}

// diff reports want and got for a failed comparison.
func diff(want, got proto.Message) string {
	return fmt.Sprintf("\n got: %v\nwant: %v", got, want)
}
