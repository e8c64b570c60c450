package session

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

var (
	updateOneof = (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor().Oneofs().ByName("update")
	eventFields = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Fields()
	eventOneof  = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
)

// eventOf wraps a session update in a SessionEvent. The two messages share
// variant names and field numbers, so the set variant is moved across by
// number; a variant added to both is carried without a code change.
func eventOf(u *acpv2.SessionUpdate) *acpv2.SessionEvent {
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

// bodyOf returns the encoding of the message in ev's event field, or nil
// when it does not marshal (the store's Append then says why).
func bodyOf(ev *acpv2.SessionEvent) []byte {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(eventOneof)
	if fd == nil || fd.Message() == nil {
		return nil
	}
	b, err := proto.Marshal(m.Get(fd).Message().Interface())
	if err != nil {
		return nil
	}
	return b
}

// updateKind names u's update in snake case (tool_call_update,
// agent_message_chunk, ...), for the metrics.
func updateKind(u *acpv2.SessionUpdate) string {
	if fd := u.ProtoReflect().WhichOneof(updateOneof); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}
