package session

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/together"
)

var (
	updateOneof = (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor().Oneofs().ByName("update")
	eventFields = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Fields()
	eventOneof  = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
)

// eventOf wraps a session update in a SessionEvent. The two messages share
// variant names and field numbers, so the set variant is moved across by
// number; a variant added to both is carried without a code change. The
// commonest variants are moved without reflection, the event and its
// variant's wrapper in one allocation.
func eventOf(u *acpv2.SessionUpdate) *acpv2.SessionEvent {
	switch v := u.GetUpdate().(type) {
	case *acpv2.SessionUpdate_ToolCallUpdate:
		return withEvent(acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: v.ToolCallUpdate},
			func(ev *acpv2.SessionEvent, w *acpv2.SessionEvent_ToolCallUpdate) { ev.Event = w })
	case *acpv2.SessionUpdate_ToolCallContentChunk:
		return withEvent(acpv2.SessionEvent_ToolCallContentChunk{ToolCallContentChunk: v.ToolCallContentChunk},
			func(ev *acpv2.SessionEvent, w *acpv2.SessionEvent_ToolCallContentChunk) { ev.Event = w })
	case *acpv2.SessionUpdate_AgentMessageChunk:
		return withEvent(acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: v.AgentMessageChunk},
			func(ev *acpv2.SessionEvent, w *acpv2.SessionEvent_AgentMessageChunk) { ev.Event = w })
	case *acpv2.SessionUpdate_AgentThoughtChunk:
		return withEvent(acpv2.SessionEvent_AgentThoughtChunk{AgentThoughtChunk: v.AgentThoughtChunk},
			func(ev *acpv2.SessionEvent, w *acpv2.SessionEvent_AgentThoughtChunk) { ev.Event = w })
	}
	return eventByNumber(u)
}

// withEvent returns an event whose event field set gives the variant
// wrapper w: the event and its wrapper in one allocation (together.Two). (The field's
// interface type is not exported, so set does the assignment.)
func withEvent[W any](w W, set func(*acpv2.SessionEvent, *W)) *acpv2.SessionEvent {
	ev, _ := together.Two(func(ev *acpv2.SessionEvent, wp *W) {
		*wp = w
		set(ev, wp)
	})
	return ev
}

// eventByNumber is eventOf for any variant, by reflection.
func eventByNumber(u *acpv2.SessionUpdate) *acpv2.SessionEvent {
	ev := &acpv2.SessionEvent{}
	um := u.ProtoReflect()
	fd := um.WhichOneof(updateOneof)
	if fd == nil {
		return nil
	}
	target := eventFields.ByNumber(fd.Number())
	ev.ProtoReflect().Set(target, protoreflect.ValueOfMessage(um.Get(fd).Message()))
	return ev
}

// toolCallEvent is the event of a merged tool call, with its variant's
// wrapper in one allocation.
func toolCallEvent(tc *acpv2.ToolCall) *acpv2.SessionEvent {
	return withEvent(acpv2.SessionEvent_ToolCall{ToolCall: tc},
		func(ev *acpv2.SessionEvent, w *acpv2.SessionEvent_ToolCall) { ev.Event = w })
}

// updateKind names u's update in snake case (tool_call_update,
// agent_message_chunk, ...), for the metrics.
func updateKind(u *acpv2.SessionUpdate) string {
	// The commonest without reflection.
	switch u.GetUpdate().(type) {
	case *acpv2.SessionUpdate_ToolCallUpdate:
		return "tool_call_update"
	case *acpv2.SessionUpdate_ToolCallContentChunk:
		return "tool_call_content_chunk"
	case *acpv2.SessionUpdate_AgentMessageChunk:
		return "agent_message_chunk"
	case *acpv2.SessionUpdate_AgentThoughtChunk:
		return "agent_thought_chunk"
	}
	if fd := u.ProtoReflect().WhichOneof(updateOneof); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}
