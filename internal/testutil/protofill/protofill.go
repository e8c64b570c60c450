// Package protofill makes, for the tests of hand-written protobuf
// encoders, messages that set every field the descriptors name: an encoder
// that lists field numbers by hand drops a field added to the proto later,
// and a test that encodes these messages with it and decodes them again
// finds the loss without a hand-kept list of fields (see Variants and
// Lost).
package protofill

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Variants returns messages of m's type that between them set every field
// of every message reachable from it to a value other than its default:
// one with every field set (the first case of each oneof), and for each
// field one with only that field set, to each of the values its type has
// here in turn, and one with every field but that one set. The values:
// each variant of a message, a list of one such element, a map of one
// such entry, and for a field with presence its zero value too.
// A message type met again inside itself (google.protobuf.Value) is empty
// there. The messages share nothing.
func Variants(m proto.Message) []proto.Message {
	var out []proto.Message
	for _, v := range variants(m.ProtoReflect().Descriptor(), m.ProtoReflect().Type(), map[protoreflect.FullName]bool{}) {
		out = append(out, v.Interface())
	}
	return out
}

// variants is Variants for message type mt, whose descriptor is md, with
// the types being filled on stack.
func variants(md protoreflect.MessageDescriptor, mt protoreflect.MessageType, stack map[protoreflect.FullName]bool) []protoreflect.Message {
	if stack[md.FullName()] {
		return []protoreflect.Message{mt.New()}
	}
	stack[md.FullName()] = true
	defer delete(stack, md.FullName())
	fields := md.Fields()
	all := mt.New()
	out := []protoreflect.Message{all}
	for i := range fields.Len() {
		fd := fields.Get(i)
		vals := values(all, fd, stack)
		if o := fd.ContainingOneof(); o == nil || o.Fields().Get(0) == fd {
			all.Set(fd, vals[0])
		}
		for _, v := range vals {
			m := mt.New()
			m.Set(fd, v)
			out = append(out, m)
		}
	}
	// And all but one field each, for an encoder whose shortcut one field
	// turns off (a heartbeat in a stream message).
	for i := range fields.Len() {
		m := proto.Clone(all.Interface()).ProtoReflect()
		m.Clear(fields.Get(i))
		out = append(out, m)
	}
	// Make each variant its own: the values above were made once per
	// field and set in both all and one other message.
	for i, m := range out {
		out[i] = proto.Clone(m.Interface()).ProtoReflect()
	}
	return out
}

// values returns the values field fd of parent (a message of its type)
// takes in the variants.
func values(parent protoreflect.Message, fd protoreflect.FieldDescriptor, stack map[protoreflect.FullName]bool) []protoreflect.Value {
	var out []protoreflect.Value
	switch {
	case fd.IsList():
		for _, e := range elems(parent.NewField(fd).List().NewElement, fd, stack) {
			l := parent.NewField(fd).List()
			l.Append(e)
			out = append(out, protoreflect.ValueOfList(l))
		}
	case fd.IsMap():
		key := scalar(fd.MapKey())
		for _, e := range elems(parent.NewField(fd).Map().NewValue, fd.MapValue(), stack) {
			mp := parent.NewField(fd).Map()
			mp.Set(key.MapKey(), e)
			out = append(out, protoreflect.ValueOfMap(mp))
		}
	case fd.Message() != nil:
		out = elems(parent.NewField(fd).Message, fd, stack)
	default:
		out = []protoreflect.Value{scalar(fd)}
		if fd.HasPresence() {
			out = append(out, fd.Default())
		}
	}
	return out
}

// elems returns the values of a list element, map value or message field
// fd: its message's variants, or one scalar value. newValue makes an empty
// one, whose message type variants fills.
func elems[T any](newValue func() T, fd protoreflect.FieldDescriptor, stack map[protoreflect.FullName]bool) []protoreflect.Value {
	if fd.Message() == nil {
		return []protoreflect.Value{scalar(fd)}
	}
	var m protoreflect.Message
	switch v := any(newValue()).(type) {
	case protoreflect.Value:
		m = v.Message()
	case protoreflect.Message:
		m = v
	}
	var out []protoreflect.Value
	for _, v := range variants(fd.Message(), m.Type(), stack) {
		out = append(out, protoreflect.ValueOfMessage(v))
	}
	return out
}

// scalar returns a value of fd's kind other than the default.
func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		for i := range vals.Len() {
			if n := vals.Get(i).Number(); n != 0 {
				return protoreflect.ValueOfEnum(n)
			}
		}
		return protoreflect.ValueOfEnum(1) // open enums keep unknown numbers
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(math.MaxUint32)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(math.MaxUint64)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x" + string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{1, 2})
	}
	panic(fmt.Sprintf("protofill: field %s of kind %v", fd.FullName(), fd.Kind()))
}

// Lost returns the paths (as "acp.v2.ToolCallUpdate.title.value") of the
// fields set in want whose values got does not hold, for a test to name
// the field an encoder dropped or changed, in order.
func Lost(want, got proto.Message) []string {
	l := lost(want.ProtoReflect(), got.ProtoReflect(), string(want.ProtoReflect().Descriptor().FullName()))
	slices.Sort(l)
	return l
}

func lost(want, got protoreflect.Message, path string) []string {
	var out []string
	want.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		if !got.IsValid() || !got.Has(fd) {
			out = append(out, p)
			return true
		}
		g := got.Get(fd)
		switch {
		case fd.IsList():
			if v.List().Len() != g.List().Len() {
				out = append(out, p)
				break
			}
			for i := range v.List().Len() {
				out = append(out, lostValue(fd, v.List().Get(i), g.List().Get(i), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				kp := fmt.Sprintf("%s[%v]", p, k.Interface())
				if !g.Map().Has(k) {
					out = append(out, kp)
				} else {
					out = append(out, lostValue(fd.MapValue(), e, g.Map().Get(k), kp)...)
				}
				return true
			})
		default:
			out = append(out, lostValue(fd, v, g, p)...)
		}
		return true
	})
	return out
}

// lostValue compares one value of field fd (an element, for a list or map).
func lostValue(fd protoreflect.FieldDescriptor, want, got protoreflect.Value, path string) []string {
	if fd.Message() != nil {
		return lost(want.Message(), got.Message(), path)
	}
	if fd.Kind() == protoreflect.BytesKind {
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			return []string{path}
		}
		return nil
	}
	if want.Interface() != got.Interface() {
		return []string{path}
	}
	return nil
}
