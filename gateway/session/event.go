package session

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventwire"
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

// body is the encoding of an event's event field, made before the event
// is numbered; with room, b begins with eventwire.Headroom bytes free for
// the rest of the event's encoding.
type body struct {
	b    []byte
	room bool
	// field is the number of the event's field that b encodes.
	field protowire.Number
}

// wire returns the encoding itself.
func (bd body) wire() []byte {
	if bd.room && bd.b != nil {
		return bd.b[eventwire.Headroom:]
	}
	return bd.b
}

// bodyOf returns the encoding of the message in ev's event field, with
// room before it, or none when it does not marshal (the store's Append
// then says why).
func bodyOf(ev *acpv2.SessionEvent) body {
	msg, num := eventMessage(ev)
	if num == 0 {
		return body{}
	}
	scratch := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(scratch)
	b, err := appendUpdate((*scratch)[:0], msg)
	if err != nil {
		return body{}
	}
	if cap(b) <= maxBodyBuffer {
		*scratch = b
	}
	// One allocation at the size needed: growing the body in place took
	// several, and left the event's array up to twice its size.
	out := make([]byte, eventwire.Headroom+len(b))
	copy(out[eventwire.Headroom:], b)
	return body{b: out, room: true, field: num}
}

// The numbers of the commonest event fields, which eventMessage names
// without reflection.
var (
	toolCallUpdateField       = eventFields.ByName("tool_call_update").Number()
	toolCallContentChunkField = eventFields.ByName("tool_call_content_chunk").Number()
	agentMessageChunkField    = eventFields.ByName("agent_message_chunk").Number()
	agentThoughtChunkField    = eventFields.ByName("agent_thought_chunk").Number()
)

// eventMessage returns the message in ev's event field and the field's
// number, or 0 when the field is unset or not a message. The commonest
// kinds are told by a type switch: WhichOneof and Get were a fifth of
// bodyOf's time (0.15 of 0.69 s in a CPU profile of 200,000 updates on
// connect+proto, docs/BENCHMARKS.md).
func eventMessage(ev *acpv2.SessionEvent) (proto.Message, protowire.Number) {
	switch e := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_ToolCallUpdate:
		return e.ToolCallUpdate, toolCallUpdateField
	case *acpv2.SessionEvent_ToolCallContentChunk:
		return e.ToolCallContentChunk, toolCallContentChunkField
	case *acpv2.SessionEvent_AgentMessageChunk:
		return e.AgentMessageChunk, agentMessageChunkField
	case *acpv2.SessionEvent_AgentThoughtChunk:
		return e.AgentThoughtChunk, agentThoughtChunkField
	}
	m := ev.ProtoReflect()
	fd := m.WhichOneof(eventOneof)
	if fd == nil || fd.Message() == nil {
		return nil, 0
	}
	return m.Get(fd).Message().Interface(), fd.Number()
}

// bodyBuffers are bodyOf's scratch buffers, up to maxBodyBuffer bytes.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxBodyBuffer = 64 << 10

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
