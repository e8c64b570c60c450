package session

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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

// bodyOf encodes the message of every event variant, the commonest told
// apart without reflection, as proto.Marshal encodes it, and names its
// field; an event without a variant has no body. A variant whose message
// is nil encodes as the empty message, as proto.Marshal has it.
func TestBodyOfEveryVariant(t *testing.T) {
	t.Parallel()
	text := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "x\ty"}}}
	title := &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "read"}}
	filled := map[string]proto.Message{
		"tool_call_update":        &acpv2.ToolCallUpdate{ToolCallId: "c", Title: title},
		"tool_call_content_chunk": &acpv2.ToolCallContentChunk{ToolCallId: "c"},
		"agent_message_chunk":     &acpv2.ContentChunk{Content: text},
		"agent_thought_chunk":     &acpv2.ContentChunk{Content: text},
		"tool_call":               &acpv2.ToolCall{ToolCallId: "c", Title: "read"},
	}
	fields := eventOneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Message() == nil {
			continue
		}
		for _, filledIn := range []bool{false, true} {
			ev := &acpv2.SessionEvent{Seq: 3}
			msg := ev.ProtoReflect().NewField(fd)
			if m, ok := filled[string(fd.Name())]; ok && filledIn {
				msg = protoreflect.ValueOfMessage(m.ProtoReflect())
			}
			ev.ProtoReflect().Set(fd, msg)
			bd := bodyOf(ev)
			want, err := proto.Marshal(msg.Message().Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !bd.room || bd.field != fd.Number() || !bytes.Equal(bd.wire(), want) {
				t.Errorf("%s (filled in %v): body %x, field %d; want %x, field %d", fd.Name(), filledIn, bd.wire(), bd.field, want, fd.Number())
			}
		}
	}
	// A variant set to a nil message: the type switch and reflection agree.
	for _, ev := range []*acpv2.SessionEvent{
		{Event: &acpv2.SessionEvent_ToolCallUpdate{}},
		{Event: &acpv2.SessionEvent_AgentMessageChunk{}},
	} {
		if bd := bodyOf(ev); bd.field == 0 || len(bd.wire()) != 0 {
			t.Errorf("%v: body %x, field %d; want the empty message's", ev, bd.wire(), bd.field)
		}
	}
	if bd := bodyOf(&acpv2.SessionEvent{Seq: 1}); bd.b != nil || bd.field != 0 {
		t.Errorf("an event without a variant has a body: %+v", bd)
	}
}
