package acpjson

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

type encoder struct {
	version Version
	buf     bytes.Buffer
	// first is true until the current object has a member.
	first bool
}

func (e *encoder) sessionUpdate(u *acpv2.SessionUpdate) error {
	m := u.ProtoReflect()
	fd := m.WhichOneof(updateOneof)
	if fd == nil {
		return fmt.Errorf("acpjson: empty SessionUpdate")
	}
	child := m.Get(fd).Message()
	tag := string(fd.Name())
	if un, ok := child.Interface().(*acpv2.UnknownUpdate); ok {
		e.value(structpb.NewStructValue(un.GetBody()))
		return nil
	}
	if e.version == V1 && !v1Tags[tag] {
		if pu, ok := child.Interface().(*acpv2.PlanUpdate); ok && pu.GetPlan().GetItems() != nil {
			// A v2 item plan is a v1 plan without its id.
			items := pu.GetPlan().GetItems()
			return e.sessionUpdate(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_Plan{Plan: &acpv2.Plan{
				Entries: items.GetEntries(), Meta: pu.GetMeta(),
			}}})
		}
		return fmt.Errorf("%w: %s", ErrNoV1Form, tag)
	}
	e.buf.WriteString(`{"sessionUpdate":`)
	e.str(tag)
	e.first = false
	if err := e.fields(child, false); err != nil {
		return err
	}
	e.buf.WriteByte('}')
	return nil
}

// object encodes m as a complete JSON object.
func (e *encoder) object(m protoreflect.Message) error {
	in := info(m.Descriptor())
	if in == nil {
		return fmt.Errorf("acpjson: %s is not an ACP type", m.Descriptor().FullName())
	}
	if in.union != nil {
		return e.union(m, in)
	}
	e.buf.WriteByte('{')
	if err := e.fields(m, true); err != nil {
		return err
	}
	e.buf.WriteByte('}')
	return nil
}

func (e *encoder) union(m protoreflect.Message, in *msgInfo) error {
	u := in.union
	fd := m.WhichOneof(u.oneof)
	if fd == nil {
		return fmt.Errorf("acpjson: empty %s", m.Descriptor().Name())
	}
	if fd == u.unknown {
		e.value(structpb.NewStructValue(m.Get(fd).Message().Interface().(*structpb.Struct)))
		return nil
	}
	tag := u.tagOf[fd.Number()]
	child := m.Get(fd).Message()
	e.buf.WriteByte('{')
	e.str(u.key)
	e.buf.WriteByte(':')
	e.str(tag)
	e.first = false
	if v := u.byTag[tag]; v.nested != "" {
		e.key(v.nested)
		if err := e.object(child); err != nil {
			return err
		}
	} else if err := e.fields(child, false); err != nil {
		return err
	}
	if err := e.fields(m, false); err != nil {
		return err
	}
	e.buf.WriteByte('}')
	return nil
}

// fields writes the members of m into the object being written.
func (e *encoder) fields(m protoreflect.Message, first bool) error {
	e.first = first
	in := info(m.Descriptor())
	fields := in.desc.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd == in.extra {
			continue
		}
		key, ok := in.keys[fd.Number()]
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			// Only EmbeddedResource has a oneof among its members.
			if in.desc != mdEmbeddedResource || !m.Has(fd) {
				continue
			}
			key, ok = "resource", true
		}
		if !ok {
			continue
		}
		if in.desc == mdSessionConfigOption && fd.Name() == "id" && e.version == V2 {
			key = "configId"
		}
		if err := e.field(m, in, fd, key); err != nil {
			return err
		}
	}
	if in.extra != nil && m.Has(in.extra) {
		extra := m.Get(in.extra).Message().Interface().(*structpb.Struct)
		for _, k := range slices.Sorted(maps.Keys(extra.GetFields())) {
			e.key(k)
			e.value(extra.GetFields()[k])
		}
	}
	return nil
}

func (e *encoder) field(m protoreflect.Message, in *msgInfo, fd protoreflect.FieldDescriptor, key string) error {
	implicit := !fd.HasPresence()
	if !m.Has(fd) && (!implicit || in.omitEmpty[fd.Number()]) {
		if fd == fdDiffChanges && v2Diff(m) {
			e.key(key)
			e.buf.WriteString("[]")
		}
		return nil
	}
	v := m.Get(fd)
	if fd.IsList() {
		e.key(key)
		return e.list(fd, v.List())
	}
	if fd.Kind() == protoreflect.MessageKind {
		child := v.Message()
		if pi := info(child.Descriptor()); pi != nil && pi.patch != nil {
			return e.patch(in, child, pi, key)
		}
	}
	e.key(key)
	return e.single(fd, v)
}

// patch writes a tri-state wrapper: a clear is null, a value its JSON. For
// v1, a clear of a ToolCallUpdate scalar is dropped and a clear of a
// collection becomes [].
func (e *encoder) patch(parent *msgInfo, p protoreflect.Message, pi *msgInfo, key string) error {
	if p.Has(pi.patch) {
		e.key(key)
		vf := pi.patch
		v := p.Get(vf)
		if vf.Kind() == protoreflect.MessageKind {
			if items := vf.Message().Fields().ByName("items"); items != nil && items.IsList() {
				return e.list(items, v.Message().Get(items).List())
			}
		}
		return e.single(vf, v)
	}
	if e.version == V1 && parent.desc == mdToolCallUpdate {
		if items := pi.patch.Message(); items != nil && items.Fields().ByName("items") != nil {
			e.key(key)
			e.buf.WriteString("[]")
		}
		return nil
	}
	e.key(key)
	e.buf.WriteString("null")
	return nil
}

func (e *encoder) list(fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	e.buf.WriteByte('[')
	for i := 0; i < l.Len(); i++ {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		if err := e.single(fd, l.Get(i)); err != nil {
			return err
		}
	}
	e.buf.WriteByte(']')
	return nil
}

// single writes one value of fd's kind (one element, for a list).
func (e *encoder) single(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	b := e.buf.AvailableBuffer()
	switch fd.Kind() {
	case protoreflect.StringKind:
		e.str(v.String())
		return nil
	case protoreflect.BoolKind:
		b = strconv.AppendBool(b, v.Bool())
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		b = strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		b = strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.DoubleKind:
		b = appendFloat(b, v.Float())
	case protoreflect.MessageKind:
		switch msg := v.Message().Interface().(type) {
		case *structpb.Value:
			e.value(msg)
			return nil
		case *structpb.Struct:
			e.value(structpb.NewStructValue(msg))
			return nil
		}
		first := e.first
		err := e.object(v.Message())
		e.first = first
		return err
	default:
		return fmt.Errorf("acpjson: unsupported field kind %v", fd.Kind())
	}
	e.buf.Write(b)
	return nil
}

// key starts a member of the object being written.
func (e *encoder) key(k string) {
	if !e.first {
		e.buf.WriteByte(',')
	}
	e.first = false
	e.str(k)
	e.buf.WriteByte(':')
}

// value writes a JSON value held in a google.protobuf.Value.
func (e *encoder) value(v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		e.buf.Write(strconv.AppendBool(e.buf.AvailableBuffer(), k.BoolValue))
	case *structpb.Value_NumberValue:
		e.buf.Write(appendFloat(e.buf.AvailableBuffer(), k.NumberValue))
	case *structpb.Value_StringValue:
		e.str(k.StringValue)
	case *structpb.Value_ListValue:
		e.buf.WriteByte('[')
		for i, item := range k.ListValue.GetValues() {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.value(item)
		}
		e.buf.WriteByte(']')
	case *structpb.Value_StructValue:
		fields := k.StructValue.GetFields()
		e.buf.WriteByte('{')
		for i, key := range slices.Sorted(maps.Keys(fields)) {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.str(key)
			e.buf.WriteByte(':')
			e.value(fields[key])
		}
		e.buf.WriteByte('}')
	default:
		e.buf.WriteString("null")
	}
}

// appendFloat writes f as a JSON number with the fewest digits that
// round-trip: in plain notation when f is 0 or 1e-6 <= |f| < 1e21, else in
// exponent notation. It picks the notation as encoding/json does but keeps
// strconv's two-digit exponent, writing 1e-07 where encoding/json writes
// 1e-7. NaN and ±Inf, which JSON cannot hold, are written as null.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}

const hexDigits = "0123456789abcdef"

// str writes s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func (e *encoder) str(s string) {
	b := e.buf.AvailableBuffer()
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainByte(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	b = append(b, '"')
	e.buf.Write(b)
}

// plainByte reports whether c stands for itself in a JSON string: ASCII,
// neither a control character, a quote nor a backslash.
func plainByte(c byte) bool { return c >= ' ' && c < utf8.RuneSelf && c != '"' && c != '\\' }

// v2Diff says whether diff d, whose changes are empty, is of ACP v2's form
// (it has none of v1's members), so that its `"changes": []`, which v2
// requires, is written back.
func v2Diff(d protoreflect.Message) bool {
	fields := d.Descriptor().Fields()
	for _, name := range []protoreflect.Name{"path", "old_text", "new_text"} {
		if d.Has(fields.ByName(name)) {
			return false
		}
	}
	return true
}
