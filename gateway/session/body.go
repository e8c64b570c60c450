package session

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/pbstruct"
)

// appendUpdate appends the encoding of an update message: the updates
// agents send most are encoded field by field, their google.protobuf
// Struct and Value fields (_meta, rawInput, rawOutput, extra) by pbstruct,
// which proto.Marshal took three times as long for; the others, and any
// that pbstruct does not encode, by proto.Marshal. Either decodes to m.
func appendUpdate(b []byte, m proto.Message) ([]byte, error) {
	var out []byte
	var err error
	switch u := m.(type) {
	case *acpv2.ToolCallUpdate:
		out, err = appendToolCallUpdate(b, u)
	case *acpv2.ToolCallContentChunk:
		out, err = appendContentChunk(b, u)
	case *acpv2.ContentChunk:
		out, err = appendChunk(b, u)
	default:
		err = pbstruct.ErrUnsupported
	}
	if errors.Is(err, pbstruct.ErrUnsupported) {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	return out, err
}

var errUTF8 = errors.New("session: string field contains invalid UTF-8")

func appendToolCallUpdate(b []byte, u *acpv2.ToolCallUpdate) ([]byte, error) {
	if len(u.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendString(b, 1, u.ToolCallId); err != nil {
		return nil, err
	}
	for i, m := range []proto.Message{u.Title, u.Kind, u.Status, u.Content, u.Locations} {
		if b, err = appendMessage(b, protowire.Number(2+i), m); err != nil {
			return nil, err
		}
	}
	for i, p := range []*acpv2.ValuePatch{u.RawInput, u.RawOutput} {
		if p == nil {
			continue
		}
		if len(p.ProtoReflect().GetUnknown()) != 0 {
			return nil, pbstruct.ErrUnsupported
		}
		switch op := p.Op.(type) {
		case *acpv2.ValuePatch_Value:
			if b, err = appendValueField(b, protowire.Number(7+i), 2, op.Value); err != nil {
				return nil, err
			}
		case *acpv2.ValuePatch_Clear:
			b = appendClear(b, protowire.Number(7+i), op.Clear)
		default:
			b = appendEmpty(b, protowire.Number(7+i))
		}
	}
	if p := u.Meta; p != nil {
		if len(p.ProtoReflect().GetUnknown()) != 0 {
			return nil, pbstruct.ErrUnsupported
		}
		switch op := p.Op.(type) {
		case *acpv2.StructPatch_Value:
			if b, err = appendStructField(b, 14, 2, op.Value); err != nil {
				return nil, err
			}
		case *acpv2.StructPatch_Clear:
			b = appendClear(b, 14, op.Clear)
		default:
			b = appendEmpty(b, 14)
		}
	}
	return appendStruct(b, 15, u.Extra)
}

func appendContentChunk(b []byte, c *acpv2.ToolCallContentChunk) ([]byte, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendString(b, 1, c.ToolCallId); err != nil {
		return nil, err
	}
	if b, err = appendMessage(b, 2, c.Content); err != nil {
		return nil, err
	}
	if b, err = appendStruct(b, 14, c.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, c.Extra)
}

func appendChunk(b []byte, c *acpv2.ContentChunk) ([]byte, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendMessage(b, 1, c.Content); err != nil {
		return nil, err
	}
	if c.MessageId != nil {
		if !utf8.ValidString(*c.MessageId) {
			return nil, errUTF8
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, *c.MessageId)
	}
	if b, err = appendStruct(b, 14, c.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, c.Extra)
}

// appendString appends a proto3 string field, omitted when empty.
func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return nil, errUTF8
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), nil
}

// appendMessage appends a message field by proto.Marshal, omitted when
// nil.
func appendMessage(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return b, nil
	}
	size := proto.Size(m)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
}

// appendEmpty appends an empty message field: a patch without an op.
func appendEmpty(b []byte, num protowire.Number) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, 0)
}

// appendClear appends a tri-state patch that clears: its field 1, a
// google.protobuf.NullValue.
func appendClear(b []byte, num protowire.Number, null structpb.NullValue) []byte {
	v := uint64(int64(null))
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeVarint(v)))
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendStruct appends a Struct field, omitted when nil.
func appendStruct(b []byte, num protowire.Number, s *structpb.Struct) ([]byte, error) {
	if s == nil {
		return b, nil
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(pbstruct.SizeStruct(s)))
	return pbstruct.AppendStruct(b, s)
}

// appendStructField appends a message field num holding only Struct s as
// its field inner: a StructPatch's value.
func appendStructField(b []byte, num, inner protowire.Number, s *structpb.Struct) ([]byte, error) {
	if s == nil {
		return appendEmpty(b, num), nil // proto.Marshal drops a nil oneof value
	}
	return appendWrapped(b, num, inner, pbstruct.SizeStruct(s), func(b []byte) ([]byte, error) { return pbstruct.AppendStruct(b, s) })
}

// appendValueField appends a message field num holding only Value v as
// its field inner: a ValuePatch's value.
func appendValueField(b []byte, num, inner protowire.Number, v *structpb.Value) ([]byte, error) {
	if v == nil {
		return appendEmpty(b, num), nil // proto.Marshal drops a nil oneof value
	}
	return appendWrapped(b, num, inner, pbstruct.SizeValue(v), func(b []byte) ([]byte, error) { return pbstruct.AppendValue(b, v) })
}

// appendWrapped appends a message field num holding only field inner, a
// message of n bytes that appendInner appends.
func appendWrapped(b []byte, num, inner protowire.Number, n int, appendInner func([]byte) ([]byte, error)) ([]byte, error) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(inner)+protowire.SizeBytes(n)))
	b = protowire.AppendTag(b, inner, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	return appendInner(b)
}
