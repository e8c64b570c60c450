package session

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventwire"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// Every field of every event reaches the event's encoding: the body
// (appendUpdate, which lists the fields of the commonest updates by hand)
// and the head eventwire writes before it decode to the event, for events
// that set each field the descriptors name, so that a field added to the
// proto fails here until body.go encodes it, rather than being dropped
// from every stored and streamed event.
func TestEventEncodingKeepsEveryField(t *testing.T) {
	t.Parallel()
	for _, v := range protofill.Variants(&acpv2.SessionEvent{}) {
		ev := v.(*acpv2.SessionEvent)
		msg, num := eventMessage(ev)
		if num == 0 {
			continue // no event field: the store's Append marshals it
		}
		bd := bodyOf(ev)
		if bd.b == nil {
			t.Fatalf("%v: no body", ev)
		}
		back := msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bd.wire(), back); err != nil || !proto.Equal(back, msg) {
			t.Fatalf("appendUpdate (gateway/session/body.go) loses %v of %v (%v): encode the field there, or leave its message to proto.Marshal",
				protofill.Lost(msg, back), msg, err)
		}
		wire, ok := eventwire.WithBodyIn(ev, bd.field, bd.b)
		if !ok {
			t.Fatalf("%v: no head", ev)
		}
		got := &acpv2.SessionEvent{}
		if err := proto.Unmarshal(wire, got); err != nil || !proto.Equal(got, ev) {
			t.Fatalf("eventwire.WithBodyIn (internal/eventwire/eventwire.go, head) loses %v of %v (%v): encode the field there", protofill.Lost(ev, got), ev, err)
		}
	}
}
