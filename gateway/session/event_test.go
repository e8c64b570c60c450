package session

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Every variant of an update becomes the event variant of the same name,
// carrying the same message, whether eventOf moves it by type or by number.
func TestEventOfCarriesEveryVariant(t *testing.T) {
	t.Parallel()
	fields := updateOneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		u := &acpv2.SessionUpdate{}
		msg := u.ProtoReflect().NewField(fd)
		u.ProtoReflect().Set(fd, msg)
		got := eventOf(u)
		if got == nil {
			t.Errorf("%s: no event", fd.Name())
			continue
		}
		gm := got.ProtoReflect()
		efd := gm.WhichOneof(eventOneof)
		if efd == nil || efd.Name() != fd.Name() || efd.Number() != fd.Number() {
			t.Errorf("%s: event variant %v", fd.Name(), efd)
			continue
		}
		if gm.Get(efd).Message().Interface() != msg.Message().Interface() {
			t.Errorf("%s: the event carries a copy, not the update's message", fd.Name())
		}
		if want := eventByNumber(u); !proto.Equal(got, want) {
			t.Errorf("%s: %v, by number %v", fd.Name(), got, want)
		}
	}
	if eventOf(&acpv2.SessionUpdate{}) != nil {
		t.Error("an update without a variant gave an event")
	}
	tc := &acpv2.ToolCall{ToolCallId: "t"}
	if ev := toolCallEvent(tc); ev.GetToolCall() != tc {
		t.Errorf("toolCallEvent: %v", ev)
	}
}
