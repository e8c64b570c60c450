package protofill_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// Between them the variants of a session event set every field of every
// message type it reaches, each oneof case included.
func TestVariantsSetEveryField(t *testing.T) {
	t.Parallel()
	vs := protofill.Variants(&acpv2.SessionEvent{})
	set := map[protoreflect.FullName]bool{}
	var mark func(m protoreflect.Message)
	mark = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			set[fd.FullName()] = true
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					mark(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
					mark(e.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				mark(v.Message())
			}
			return true
		})
	}
	for _, v := range vs {
		mark(v.ProtoReflect())
		if _, err := proto.Marshal(v); err != nil {
			t.Fatalf("%v: %v", v, err)
		}
	}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			if !set[fd.FullName()] {
				t.Errorf("no variant sets %s", fd.FullName())
			}
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if fd.Message() != nil {
				walk(fd.Message())
			}
		}
	}
	walk((&acpv2.SessionEvent{}).ProtoReflect().Descriptor())
	t.Logf("%d variants, %d message types", len(vs), len(seen))
}

// Lost names the fields a copy lacks or holds other values in.
func TestLost(t *testing.T) {
	t.Parallel()
	line := uint32(4)
	want := &acpv2.ToolCall{ToolCallId: "c", Title: "t", Locations: []*acpv2.ToolCallLocation{{Path: "/p", Line: &line}}}
	got := proto.Clone(want).(*acpv2.ToolCall)
	if l := protofill.Lost(want, got); len(l) != 0 {
		t.Fatalf("a copy lost %v", l)
	}
	got.Title = "u"
	got.Locations[0].Line = nil
	l := protofill.Lost(want, got)
	if w := []string{"acp.v2.ToolCall.locations[0].line", "acp.v2.ToolCall.title"}; !slices.Equal(l, w) {
		t.Fatalf("lost %v, want %v", l, w)
	}
}
