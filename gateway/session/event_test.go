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

// The commonest variants' events, and a merged call's, are made in one
// allocation, the event with its variant's wrapper.
func TestEventOfAllocatesOnce(t *testing.T) {
	for _, u := range []*acpv2.SessionUpdate{
		{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{}}},
		{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{}}},
		{Update: &acpv2.SessionUpdate_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{}}},
		{Update: &acpv2.SessionUpdate_AgentThoughtChunk{AgentThoughtChunk: &acpv2.ContentChunk{}}},
	} {
		if n := testing.AllocsPerRun(10, func() { eventSink = eventOf(u) }); n != 1 {
			t.Errorf("%T: %v allocations", u.Update, n)
		}
	}
	tc := &acpv2.ToolCall{}
	if n := testing.AllocsPerRun(10, func() { eventSink = toolCallEvent(tc) }); n != 1 {
		t.Errorf("toolCallEvent: %v allocations", n)
	}
}

var eventSink *acpv2.SessionEvent

// updateKind names an update by its variant's field, the commonest ones
// without reflection included.
func TestUpdateKindIsTheVariantsName(t *testing.T) {
	t.Parallel()
	text := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "x"}}}
	for _, u := range []*acpv2.SessionUpdate{
		{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{ToolCallId: "c"}}},
		{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{ToolCallId: "c"}}},
		{Update: &acpv2.SessionUpdate_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Content: text}}},
		{Update: &acpv2.SessionUpdate_AgentThoughtChunk{AgentThoughtChunk: &acpv2.ContentChunk{Content: text}}},
		{Update: &acpv2.SessionUpdate_UserMessageChunk{UserMessageChunk: &acpv2.ContentChunk{Content: text}}},
	} {
		want := string(u.ProtoReflect().WhichOneof(updateOneof).Name())
		if got := updateKind(u); got != want {
			t.Errorf("updateKind = %q, want %q", got, want)
		}
	}
	if got := updateKind(&acpv2.SessionUpdate{}); got != "unknown" {
		t.Errorf("updateKind of an empty update = %q, want unknown", got)
	}
}
