// Package eventjson writes the protojson encoding of the gateway's
// messages, fast: the JSON that protojson.MarshalOptions{}.Marshal gives
// for a message, member by member (not byte for byte: protojson's spacing
// changes from build to build).
//
// protojson sorts each message's fields and each Struct's keys, and goes
// through several layers of reflection for every value: it was half of the
// gateway's CPU on the JSON path. This package walks a message by a plan
// made once for its descriptor (its fields in declaration order with their
// quoted JSON names), writes google.protobuf.Struct, Value, ListValue and
// Timestamp from their Go types, and copies strings that need no escape as
// they are.
//
// Whatever it does not write as protojson does (well-known types other than
// those four, extensions, groups, required fields, nil elements) and
// whatever protojson refuses (strings that are not UTF-8, a Value number
// that is not finite, a Value with no kind, a Timestamp out of range) sends
// the whole message to protojson, so its output and its errors are
// protojson's there.
package eventjson

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Marshal returns m's JSON encoding, the same JSON as
// protojson.MarshalOptions{}.Marshal(m) gives, member by member, or
// protojson's error.
func Marshal(m proto.Message) ([]byte, error) {
	b, _, _, err := marshal(m, nil, nil)
	return b, err
}

// MarshalReusing returns Marshal(m) in segments, whose concatenation is
// Marshal's JSON, and the [Parts] of the first message of descriptor of
// within m (nil when m holds none, or when Marshal leaves m to
// protojson). Those of that message's message values (each element of a
// list) that prev, the Parts of an earlier version of it, holds (the same
// message, by pointer, at the same field and index) are not written again
// but are segments of their own, prev's JSON of them: the JSON is the
// same, as the messages are never modified, and only what changed is
// written and allocated. The segments are shared, with prev and with the
// next version's: they must not be modified.
func MarshalReusing(m proto.Message, of protoreflect.MessageDescriptor, prev *Parts) ([][]byte, *Parts, error) {
	b, segs, parts, err := marshal(m, of, prev)
	if segs == nil && err == nil {
		segs = [][]byte{b}
	}
	return segs, parts, err
}

// marshal is Marshal, writing the message of descriptor of by parts when
// of is not nil, and reusing prev's: its JSON is b, or the segments segs
// when some parts were reused.
func marshal(m proto.Message, of protoreflect.MessageDescriptor, prev *Parts) (b []byte, segs [][]byte, parts *Parts, err error) {
	e := encoders.Get().(*encoder)
	defer e.release()
	e.b = e.scratch[:0]
	e.reuse.of = of
	if prev != nil && prev.of == of {
		e.reuse.prev = prev.parts
	}
	ok := e.top(m)
	e.scratch = e.b[:0]
	if !ok {
		b, err = protojson.MarshalOptions{}.Marshal(m)
		return b, nil, nil, err
	}
	out := append(make([]byte, 0, len(e.b)), e.b...)
	segs, parts = e.reuse.made(out)
	return out, segs, parts, nil
}

// MarshalAppend appends m's JSON encoding to dst, as Marshal gives it.
func MarshalAppend(dst []byte, m proto.Message) ([]byte, error) {
	if out, ok := appendFast(dst, m); ok {
		return out, nil
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

// appendFast appends m's JSON encoding to dst, or reports false where it
// leaves m to protojson.
func appendFast(dst []byte, m proto.Message) ([]byte, bool) {
	e := encoders.Get().(*encoder)
	defer e.release()
	e.b = dst
	ok := e.top(m)
	return e.b, ok
}

// encoder writes one message at a time; encoders keeps them, with their
// scratch buffers, between messages.
type encoder struct {
	b []byte
	// scratch is Marshal's buffer, kept for the next message.
	scratch []byte
	// entries is a stack of the Structs being written, each its entries
	// sorted by key.
	entries []entry
	// reuse is MarshalReusing's.
	reuse reuse
}

type entry struct {
	key string
	val *structpb.Value
}

var encoders = sync.Pool{New: func() any { return new(encoder) }}

// maxKeptScratch bounds the buffer an encoder keeps between messages.
const maxKeptScratch = 64 << 10

func (e *encoder) release() {
	if cap(e.scratch) > maxKeptScratch {
		e.scratch = nil
	}
	clear(e.entries) // hold no message: past len, structObject has cleared them
	e.entries = e.entries[:0]
	e.reuse.reset()
	e.b = nil
	encoders.Put(e)
}

// top writes m, reporting false where protojson should.
func (e *encoder) top(m proto.Message) bool {
	if m == nil {
		return false
	}
	pm := m.ProtoReflect()
	if !pm.IsValid() {
		return false
	}
	return e.message(pm, planOf(pm.Descriptor()))
}

// message writes m by p, or by its own descriptor's plan should m's
// descriptor not be p's.
func (e *encoder) message(m protoreflect.Message, p *plan) bool {
	if md := m.Descriptor(); md != p.md {
		p = planOf(md)
	}
	switch p.wkt {
	case ordinary:
	case wktStruct:
		s, ok := m.Interface().(*structpb.Struct)
		return ok && s != nil && e.structObject(s)
	case wktValue:
		v, ok := m.Interface().(*structpb.Value)
		return ok && e.value(v)
	case wktListValue:
		l, ok := m.Interface().(*structpb.ListValue)
		return ok && e.listValue(l)
	case wktTimestamp:
		t, ok := m.Interface().(*timestamppb.Timestamp)
		return ok && t != nil && e.timestamp(t.GetSeconds(), t.GetNanos())
	default:
		return false
	}
	if !m.IsValid() {
		return false
	}
	// The message MarshalReusing reuses the parts of: its message values
	// are written by parts.
	byParts := e.reuse.of == p.md && !e.reuse.found
	if byParts {
		e.reuse.found = true
	}
	e.b = append(e.b, '{')
	first, ok := true, false
	for i := range p.steps {
		s := &p.steps[i]
		f := s.field
		var v protoreflect.Value
		if s.oneof != nil {
			fd := m.WhichOneof(s.oneof)
			if fd == nil {
				continue
			}
			f = s.members[fd.Index()-s.first]
			if f.fd != fd {
				return false
			}
			v = m.Get(fd)
		} else if v, ok = populated(m, f); !ok {
			continue
		}
		if first {
			e.b = append(e.b, f.key[1:]...)
			first = false
		} else {
			e.b = append(e.b, f.key...)
		}
		if byParts && f.kind == kindMessage && f.mapVal == nil {
			if !e.parts(v, f, i) {
				return false
			}
			continue
		}
		if !e.field(v, f) {
			return false
		}
	}
	e.b = append(e.b, '}')
	return true
}

// populated returns the value of f in m, or false where m.Has(f.fd) is.
func populated(m protoreflect.Message, f *field) (protoreflect.Value, bool) {
	switch f.presence {
	case validPresence:
		v := m.Get(f.fd)
		return v, v.Message().IsValid()
	case nonZeroPresence:
		v := m.Get(f.fd)
		switch f.kind {
		case kindBool:
			return v, v.Bool()
		case kindString:
			return v, v.String() != ""
		case kindInt32, kindInt64:
			return v, v.Int() != 0
		case kindUint32, kindUint64:
			return v, v.Uint() != 0
		case kindFloat, kindDouble:
			return v, math.Float64bits(v.Float()) != 0
		case kindBytes:
			return v, len(v.Bytes()) != 0
		case kindEnum, kindNull:
			return v, v.Enum() != 0
		}
	}
	if !m.Has(f.fd) {
		return protoreflect.Value{}, false
	}
	return m.Get(f.fd), true
}

// field writes a field's value: a list, a map or a single value.
func (e *encoder) field(v protoreflect.Value, f *field) bool {
	switch {
	case f.list:
		l := v.List()
		e.b = append(e.b, '[')
		for i := range l.Len() {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			if !e.single(l.Get(i), f) {
				return false
			}
		}
		e.b = append(e.b, ']')
		return true
	case f.mapVal != nil:
		return e.mapObject(v.Map(), f)
	default:
		return e.single(v, f)
	}
}

// single writes a value of f's kind.
func (e *encoder) single(v protoreflect.Value, f *field) bool {
	switch f.kind {
	case kindBool:
		e.b = strconv.AppendBool(e.b, v.Bool())
	case kindString:
		return e.str(v.String())
	case kindInt32:
		e.b = strconv.AppendInt(e.b, v.Int(), 10)
	case kindUint32:
		e.b = strconv.AppendUint(e.b, v.Uint(), 10)
	case kindInt64:
		e.b = append(strconv.AppendInt(append(e.b, '"'), v.Int(), 10), '"')
	case kindUint64:
		e.b = append(strconv.AppendUint(append(e.b, '"'), v.Uint(), 10), '"')
	case kindFloat:
		e.b = appendFloat(e.b, v.Float(), 32)
	case kindDouble:
		e.b = appendFloat(e.b, v.Float(), 64)
	case kindBytes:
		e.b = append(base64.StdEncoding.AppendEncode(append(e.b, '"'), v.Bytes()), '"')
	case kindEnum:
		e.b = f.enum.append(e.b, v.Enum())
	case kindNull:
		e.b = append(e.b, "null"...)
	case kindMessage:
		return e.message(v.Message(), f.msg)
	default:
		return false
	}
	return true
}

// mapObject writes a map field as an object, its keys in protojson's
// order.
func (e *encoder) mapObject(mv protoreflect.Map, f *field) bool {
	keys := make([]protoreflect.MapKey, 0, mv.Len())
	mv.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, f.keyOrder)
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if !e.str(k.String()) {
			return false
		}
		e.b = append(e.b, ':')
		if !e.single(mv.Get(k), f.mapVal) {
			return false
		}
	}
	e.b = append(e.b, '}')
	return true
}

// structObject writes a google.protobuf.Struct as an object, its keys
// sorted as protojson sorts them.
func (e *encoder) structObject(s *structpb.Struct) bool {
	base := len(e.entries)
	for k, v := range s.GetFields() {
		e.entries = append(e.entries, entry{k, v})
	}
	end := len(e.entries)
	slices.SortFunc(e.entries[base:end], func(a, b entry) int { return strings.Compare(a.key, b.key) })
	e.b = append(e.b, '{')
	for i := base; i < end; i++ {
		if i > base {
			e.b = append(e.b, ',')
		}
		// e.entries may grow, and move, under the values written.
		en := e.entries[i]
		if !e.str(en.key) {
			return false
		}
		e.b = append(e.b, ':')
		if !e.value(en.val) {
			return false
		}
	}
	clear(e.entries[base:end])
	e.entries = e.entries[:base]
	e.b = append(e.b, '}')
	return true
}

// value writes a google.protobuf.Value as the JSON value it holds.
func (e *encoder) value(v *structpb.Value) bool {
	if v == nil {
		return false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		if k == nil {
			return false
		}
		e.b = append(e.b, "null"...)
	case *structpb.Value_NumberValue:
		if k == nil || math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return false
		}
		e.b = appendFloat(e.b, k.NumberValue, 64)
	case *structpb.Value_StringValue:
		return k != nil && e.str(k.StringValue)
	case *structpb.Value_BoolValue:
		if k == nil {
			return false
		}
		e.b = strconv.AppendBool(e.b, k.BoolValue)
	case *structpb.Value_StructValue:
		return k != nil && k.StructValue != nil && e.structObject(k.StructValue)
	case *structpb.Value_ListValue:
		return k != nil && e.listValue(k.ListValue)
	default:
		return false
	}
	return true
}

// listValue writes a google.protobuf.ListValue as an array.
func (e *encoder) listValue(l *structpb.ListValue) bool {
	if l == nil {
		return false
	}
	e.b = append(e.b, '[')
	for i, v := range l.GetValues() {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if !e.value(v) {
			return false
		}
	}
	e.b = append(e.b, ']')
	return true
}

// The range of google.protobuf.Timestamp that protojson writes: years 1
// to 9999.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestamp writes a google.protobuf.Timestamp as protojson does: RFC 3339
// in UTC, with 0, 3, 6 or 9 digits of fraction, as few as hold it.
func (e *encoder) timestamp(secs int64, nanos int32) bool {
	// protojson takes nanos of 1e9 too, as the next second; not here.
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= 1e9 {
		return false
	}
	t := time.Unix(secs, 0).UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	b := append(e.b, '"')
	b = appendDigits(b, year, 4)
	b = appendDigits(append(b, '-'), int(month), 2)
	b = appendDigits(append(b, '-'), day, 2)
	b = appendDigits(append(b, 'T'), hour, 2)
	b = appendDigits(append(b, ':'), minute, 2)
	b = appendDigits(append(b, ':'), sec, 2)
	switch n := int(nanos); {
	case n == 0:
	case n%1e6 == 0:
		b = appendDigits(append(b, '.'), n/1e6, 3)
	case n%1e3 == 0:
		b = appendDigits(append(b, '.'), n/1e3, 6)
	default:
		b = appendDigits(append(b, '.'), n, 9)
	}
	e.b = append(b, 'Z', '"')
	return true
}

// appendDigits appends n, not negative, in width digits, zeros first.
func appendDigits(b []byte, n, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:width]...)
}

// appendFloat appends n as protojson writes a float of bitSize bits: the
// shortest decimal that reads back as n, in exponent form below 1e-6 and
// from 1e21 (as JavaScript), and NaN and the infinities as strings.
func appendFloat(b []byte, n float64, bitSize int) []byte {
	switch {
	case math.IsNaN(n):
		return append(b, `"NaN"`...)
	case math.IsInf(n, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(b, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		// A float's bounds are float32's, as protojson compares them.
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, n, format, -1, bitSize)
	if format == 'e' {
		// e-07 becomes e-7, as protojson (and JavaScript) writes it.
		if l := len(b); b[l-4] == 'e' && b[l-3] == '-' && b[l-2] == '0' {
			b[l-2] = b[l-1]
			b = b[:l-1]
		}
	}
	return b
}

// escapes says, for each byte, what it is written as in a JSON string: 0
// for itself, 'u' for \u00XX, or the letter after the backslash.
var escapes = func() (t [256]byte) {
	for c := range 0x20 {
		t[c] = 'u'
	}
	t['\b'], t['\f'], t['\n'], t['\r'], t['\t'] = 'b', 'f', 'n', 'r', 't'
	t['"'], t['\\'] = '"', '\\'
	return t
}()

const hexDigits = "0123456789abcdef"

// str writes s as a JSON string as protojson escapes it (only quotes,
// backslashes and control characters), or reports false for a string
// that is not UTF-8, which protojson refuses. Runs of eight bytes with
// nothing to escape are passed over at once, and copied with the rest of
// their run.
func (e *encoder) str(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	b := append(e.b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		for i+8 <= len(s) && !escapable(le64(s[i:])) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		esc := escapes[c]
		if esc == 0 {
			continue
		}
		b = append(b, s[start:i]...)
		if esc == 'u' {
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		} else {
			b = append(b, '\\', esc)
		}
		start = i + 1
	}
	e.b = append(append(b, s[start:]...), '"')
	return true
}

// le64 reads the first eight bytes of s as a little-endian number.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// escapable reports whether any of the eight bytes in x is a control
// character, a quote or a backslash. (x-ones*n) & ^x & highs is not zero
// just when a byte of x is below n, for n up to 0x80: below 0x20, or below
// 1 (zero) after the XOR at a quote or a backslash.
func escapable(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := func(x, n uint64) uint64 { return (x - ones*n) & ^x & highs }
	return below(x, 0x20)|below(x^(ones*'"'), 1)|below(x^(ones*'\\'), 1) != 0
}
