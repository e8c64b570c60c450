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
		vs, inner := sizeValue(v)
		b = protowire.AppendTag(b, fieldEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(k, vs)))
		b = protowire.AppendTag(b, fieldKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, fieldEntryValue, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(vs))
		if b, err = appendValue(b, v, inner); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// AppendValue appends the encoding of v to b.
func AppendValue(b []byte, v *structpb.Value) ([]byte, error) {
	_, inner := sizeValue(v)
	return appendValue(b, v, inner)
}

// appendValue appends v's encoding, where inner is the length sizeValue
// gives for its Struct or list, checking as it goes what proto.Marshal
// would refuse or this package does not encode. (Sizing first, rather
// than moving each nested message's contents along once its length is
// known, keeps long values from being moved once per level.)
func appendValue(b []byte, v *structpb.Value, inner int) ([]byte, error) {
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
		b = protowire.AppendTag(b, fieldStruct, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(inner))
		return AppendStruct(b, k.StructValue)
	case *structpb.Value_ListValue:
		l := k.ListValue
		if l == nil || len(l.ProtoReflect().GetUnknown()) != 0 {
			return nil, ErrUnsupported
		}
		b = protowire.AppendTag(b, fieldList, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(inner))
		var err error
		for _, e := range l.GetValues() {
			es, ei := sizeValue(e)
			b = protowire.AppendTag(b, fieldValues, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(es))
			if b, err = appendValue(b, e, ei); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func sizeStruct(s *structpb.Struct) int {
	n := 0
	for k, v := range s.GetFields() {
		vs, _ := sizeValue(v)
		n += protowire.SizeTag(fieldEntries) + protowire.SizeBytes(entrySize(k, vs))
	}
	return n
}

// entrySize is the length of a Struct entry of key k and a value of vs
// bytes.
func entrySize(k string, vs int) int {
	return protowire.SizeTag(fieldKey) + protowire.SizeBytes(len(k)) +
		protowire.SizeTag(fieldEntryValue) + protowire.SizeBytes(vs)
}

// sizeValue returns the length of v's encoding and, for a Struct or a
// list, the length of that message's, which appendValue takes: each
// level sizes what is below it once.
func sizeValue(v *structpb.Value) (n, inner int) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return protowire.SizeTag(fieldNull) + protowire.SizeVarint(uint64(k.NullValue)), 0
	case *structpb.Value_NumberValue:
		return protowire.SizeTag(fieldNumber) + protowire.SizeFixed64(), 0
	case *structpb.Value_StringValue:
		return protowire.SizeTag(fieldString) + protowire.SizeBytes(len(k.StringValue)), 0
	case *structpb.Value_BoolValue:
		return protowire.SizeTag(fieldBool) + protowire.SizeVarint(protowire.EncodeBool(k.BoolValue)), 0
	case *structpb.Value_StructValue:
		inner = sizeStruct(k.StructValue)
		return protowire.SizeTag(fieldStruct) + protowire.SizeBytes(inner), inner
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			es, _ := sizeValue(e)
			inner += protowire.SizeTag(fieldValues) + protowire.SizeBytes(es)
		}
		return protowire.SizeTag(fieldList) + protowire.SizeBytes(inner), inner
	}
	return 0, 0
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
