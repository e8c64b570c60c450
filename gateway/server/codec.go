package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
)

// protoCodec is connect's "proto" codec, except that a stream message
// holding only an event (a PromptResponse or WatchResponse) reuses that
// event's encoding: an event is sent by every stream watching its session,
// and marshalling it (its google.protobuf.Struct values above all) once per
// stream was the gateway's largest cost with many watchers. A stream sends
// an encoded.Reply, with the encoded event the session made when it
// numbered the event (or a store read back); any other message is
// marshalled. The output is the bytes proto.Marshal gives for the message
// (which, like it, writes map entries in no set order).
type protoCodec struct{}

func newProtoCodec() *protoCodec { return &protoCodec{} }

func (*protoCodec) Name() string { return "proto" }

func (*protoCodec) IsBinary() bool { return true }

func (c *protoCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

func (c *protoCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	ev, m := replyEvent(m)
	if ev != nil {
		dst = protowire.AppendTag(dst, eventField, protowire.BytesType)
		return protowire.AppendBytes(dst, ev.Proto()), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

// replyEvent returns the encoded event of an encoded.Reply whose message
// (a PromptResponse or WatchResponse) holds only its event, else nil; and
// the message, to marshal when there is no such event.
func replyEvent(m any) (*encoded.Event, any) {
	r, ok := m.(*encoded.Reply)
	if !ok {
		return nil, m
	}
	if r.Event == nil || !soleEvent(r.Message) {
		return nil, r.Message
	}
	return r.Event, r.Message
}

// soleEvent says whether m is a stream message (a PromptResponse or
// WatchResponse) whose only field is its event.
func soleEvent(m any) bool {
	var r interface {
		proto.Message
		GetEvent() *acpv2.SessionEvent
		GetHeartbeat() *timestamppb.Timestamp
	}
	switch m := m.(type) {
	case *acpv2.PromptResponse:
		r = m
	case *acpv2.WatchResponse:
		r = m
	default:
		return false
	}
	return r.GetEvent() != nil && r.GetHeartbeat() == nil && len(r.ProtoReflect().GetUnknown()) == 0
}

// eventField is the number of the event field of PromptResponse and
// WatchResponse.
const eventField = 1

func (*protoCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto(m)
	}
	if err := proto.Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

func (*protoCodec) MarshalStable(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pm)
}

func errNotProto(m any) error { return fmt.Errorf("%T doesn't implement proto.Message", m) }

// jsonCodec is connect's "json" codec, except that, as protoCodec does, it
// writes an encoded.Reply with its event's JSON, made once however many
// streams send it, and that it marshals with eventjson rather than
// protojson (which was half of the gateway's CPU on this path). Its output
// is the same JSON as protojson.Marshal's, member by member; not the same
// bytes, whose spacing protojson varies from build to build.
type jsonCodec struct{}

func newJSONCodec() *jsonCodec { return &jsonCodec{} }

func (*jsonCodec) Name() string { return "json" }

func (*jsonCodec) IsBinary() bool { return false }

func (c *jsonCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// jsonEventField opens the JSON of a response whose only field is its
// event.
const jsonEventField = `{"event":`

func (c *jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	ev, m := replyEvent(m)
	if ev != nil {
		dst, err := ev.AppendJSON(append(dst, jsonEventField...))
		if err != nil {
			return nil, err
		}
		return append(dst, '}'), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return eventjson.MarshalAppend(dst, pm)
}

func (*jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto(m)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	// Discard unknown fields, as connect's codec does, so that clients
	// and servers need not use exactly the same schema.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

func (c *jsonCodec) MarshalStable(m any) ([]byte, error) {
	// As connect's, which compacts protojson's output: eventjson's has no
	// spaces, but a message it leaves to protojson has.
	data, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
