// Package pbstruct encodes google.protobuf.Struct and Value messages
// without reflection. proto.Marshal walks their maps and oneofs through
// its table-driven coders, which made the Struct values in the _meta and
// rawInput of agent updates the largest part of encoding an update's
// event. The bytes are a valid encoding of the message, and decode to it;
// like proto.Marshal's, map entries come in no set order.
package pbstruct

import (
	"errors"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// ErrUnsupported is returned for a message this package does not encode
// (unknown fields, a nil element), which proto.Marshal should have.
var ErrUnsupported = errors.New("pbstruct: message not encoded here")

// errUTF8 is proto.Marshal's refusal of a string that is not UTF-8.
var errUTF8 = errors.New("pbstruct: string field contains invalid UTF-8")

// Field numbers of google.protobuf.Value's kinds, Struct's fields and
// ListValue's values.
const (
	fieldNull, fieldNumber, fieldString, fieldBool, fieldStruct, fieldList = 1, 2, 3, 4, 5, 6
	fieldEntries, fieldKey, fieldEntryValue, fieldValues                   = 1, 1, 2, 1
)

// AppendStruct appends the encoding of s to b.
func AppendStruct(b []byte, s *structpb.Struct) ([]byte, error) {
	if s == nil || len(s.ProtoReflect().GetUnknown()) != 0 {
		return nil, ErrUnsupported
	}
	var err error
	for k, v := range s.GetFields() {
		if !utf8.ValidString(k) {
			return nil, errUTF8
		}
		if b, err = AppendNested(b, fieldEntries, entry{k, v}, appendEntry); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// entry is a member of a Struct, encoded as a map entry.
type entry struct {
	k string
	v *structpb.Value
}

func appendEntry(b []byte, e entry) ([]byte, error) {
	b = protowire.AppendTag(b, fieldKey, protowire.BytesType)
	b = protowire.AppendString(b, e.k)
	return AppendNested(b, fieldEntryValue, e.v, AppendValue)
}

// AppendValue appends the encoding of v to b.
func AppendValue(b []byte, v *structpb.Value) ([]byte, error) {
	if v == nil || len(v.ProtoReflect().GetUnknown()) != 0 {
		return nil, ErrUnsupported
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		b = protowire.AppendTag(b, fieldNull, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(k.NullValue))
	case *structpb.Value_NumberValue:
		b = protowire.AppendTag(b, fieldNumber, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(k.NumberValue))
	case *structpb.Value_StringValue:
		if !utf8.ValidString(k.StringValue) {
			return nil, errUTF8
		}
		b = protowire.AppendTag(b, fieldString, protowire.BytesType)
		b = protowire.AppendString(b, k.StringValue)
	case *structpb.Value_BoolValue:
		b = protowire.AppendTag(b, fieldBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(k.BoolValue))
	case *structpb.Value_StructValue:
		return AppendNested(b, fieldStruct, k.StructValue, AppendStruct)
	case *structpb.Value_ListValue:
		return AppendNested(b, fieldList, k.ListValue, appendList)
	}
	return b, nil
}

func appendList(b []byte, l *structpb.ListValue) ([]byte, error) {
	if l == nil || len(l.ProtoReflect().GetUnknown()) != 0 {
		return nil, ErrUnsupported
	}
	var err error
	for _, e := range l.GetValues() {
		if b, err = AppendNested(b, fieldValues, e, AppendValue); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// AppendNested appends a message field num whose contents appendInner
// appends from m. The length goes before the contents, which are moved
// along for a length of more than one byte: no pass sizes them first.
func AppendNested[M any](b []byte, num protowire.Number, m M, appendInner func([]byte, M) ([]byte, error)) ([]byte, error) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b, err := appendInner(append(b, 0), m)
	if err != nil {
		return nil, err
	}
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b, nil
	}
	k := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, k-1)...)
	copy(b[at+k:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b, nil
}
