package encoded

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// withBody, which writes an event's fields other than its event field by
// hand, keeps every field: for events that set each field the descriptors
// name, with the event field's body as proto.Marshal writes it. A field
// added to SessionEvent fails here until head encodes it.
func TestHeadKeepsEveryField(t *testing.T) {
	t.Parallel()
	oneof := (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	for _, v := range protofill.Variants(&acpv2.SessionEvent{}) {
		ev := v.(*acpv2.SessionEvent)
		fd := ev.ProtoReflect().WhichOneof(oneof)
		if fd == nil {
			continue // no body: the session marshals such an event whole
		}
		body, err := proto.Marshal(ev.ProtoReflect().Get(fd).Message().Interface())
		if err != nil {
			t.Fatal(err)
		}
		wire, ok := withBody(ev, fd.Number(), body)
		if !ok {
			t.Fatalf("%v: no head", ev)
		}
		back := &acpv2.SessionEvent{}
		if err := proto.Unmarshal(wire, back); err != nil || !proto.Equal(back, ev) {
			t.Fatalf("WithBody (internal/encoded/head.go, head) loses %v of %v (%v): encode the field there",
				protofill.Lost(ev, back), ev, err)
		}
	}
}
