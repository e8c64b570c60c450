package eventjson

import (
	"cmp"
	"strconv"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// plan is how a message of one descriptor is written: its fields in
// declaration order (protojson's order), or a well-known type's form.
type plan struct {
	md    protoreflect.MessageDescriptor
	wkt   wkt
	steps []step
}

// wkt is the form a message is written in.
type wkt uint8

const (
	ordinary wkt = iota
	wktStruct
	wktValue
	wktListValue
	wktTimestamp
	// unsupported messages are left to protojson: other well-known types,
	// message sets, messages with extensions or required fields or groups.
	unsupported
)

// step is a field of the message, or a oneof whose members are declared
// one after the other: it is written as the member WhichOneof gives.
type step struct {
	field   *field
	oneof   protoreflect.OneofDescriptor
	first   int // the index of the oneof's first member in the message
	members []*field
}

// kind is how a single value is written.
type kind uint8

const (
	kindBool kind = iota + 1
	kindString
	kindInt32
	kindUint32
	kindInt64 // as a quoted decimal
	kindUint64
	kindFloat
	kindDouble
	kindBytes // as standard base64
	kindEnum  // as its value's name, or its number where it has none
	kindNull  // google.protobuf.NullValue
	kindMessage
)

// field is how a field is written.
type field struct {
	fd protoreflect.FieldDescriptor
	// key is the field's JSON name, quoted, between a comma and a colon.
	key  string
	kind kind
	list bool
	// presence is how the field is found to be populated.
	presence presence
	// mapVal writes a map field's values; keyOrder orders its keys.
	mapVal   *field
	keyOrder func(a, b protoreflect.MapKey) int
	enum     *enumNames
	msg      *plan
}

// presence is how a field is found to be populated, as
// protoreflect.Message.Has tells, at the least cost.
type presence uint8

const (
	// hasPresence is Has's: proto3 optional fields, proto2 fields, lists
	// and maps (Get makes a list's or map's view even when it is empty).
	hasPresence presence = iota
	// validPresence is a singular message's: Get gives a message that is
	// not valid where Has is false, and Has would do Get's work again.
	validPresence
	// nonZeroPresence is a scalar's without presence: populated when not
	// the zero value (for a float, when any bit is set, so -0 too). The
	// generated messages' Get reads such a field without reflection, their
	// Has with it.
	nonZeroPresence
)

var (
	// plans holds a plan per message descriptor.
	plans sync.Map
	// planning is held while plans are made, so that the plans of
	// messages that refer to each other are stored together, complete.
	planning sync.Mutex
)

// planOf returns md's plan, making it (and those of the messages its
// fields hold) the first time.
func planOf(md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(md); ok {
		return p.(*plan)
	}
	planning.Lock()
	defer planning.Unlock()
	made := map[protoreflect.MessageDescriptor]*plan{}
	p := makePlan(md, made)
	for d, q := range made {
		plans.Store(d, q)
	}
	return p
}

// makePlan makes md's plan, or finds it in plans or made (the plans being
// made, not all complete yet).
func makePlan(md protoreflect.MessageDescriptor, made map[protoreflect.MessageDescriptor]*plan) *plan {
	if p, ok := plans.Load(md); ok {
		return p.(*plan)
	}
	if p := made[md]; p != nil {
		return p
	}
	p := &plan{md: md}
	made[md] = p
	if md.FullName().Parent() == "google.protobuf" {
		p.wkt = wellKnown[md.Name()]
		if p.wkt == ordinary {
			p.wkt = unsupported
		}
		return p
	}
	if ms, ok := md.(interface{ IsMessageSet() bool }); ok && ms.IsMessageSet() ||
		md.ExtensionRanges().Len() > 0 || md.RequiredNumbers().Len() > 0 {
		p.wkt = unsupported
		return p
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		f, ok := makeField(fd, made)
		if !ok {
			p.wkt = unsupported
			p.steps = nil
			return p
		}
		od := fd.ContainingOneof()
		switch {
		case od == nil || od.IsSynthetic():
			p.steps = append(p.steps, step{field: f})
		case od.Fields().Get(0) == fd:
			p.steps = append(p.steps, step{oneof: od, first: fd.Index(), members: []*field{f}})
		default:
			// A oneof's members are declared one after the other
			// (protodesc requires it), so this one's step is the last.
			last := &p.steps[len(p.steps)-1]
			last.members = append(last.members, f)
		}
	}
	return p
}

// wellKnown is the form of the well-known types written here.
var wellKnown = map[protoreflect.Name]wkt{
	"Struct":    wktStruct,
	"Value":     wktValue,
	"ListValue": wktListValue,
	"Timestamp": wktTimestamp,
}

// makeField makes the plan of a field, false for one protojson alone
// writes.
func makeField(fd protoreflect.FieldDescriptor, made map[protoreflect.MessageDescriptor]*plan) (*field, bool) {
	key := encoder{b: []byte{','}}
	if !key.str(fd.JSONName()) {
		return nil, false
	}
	f := &field{fd: fd, key: string(append(key.b, ':')), list: fd.IsList(), presence: hasPresence}
	switch {
	case fd.IsList() || fd.IsMap():
	case fd.Message() != nil:
		f.presence = validPresence
	case !fd.HasPresence():
		f.presence = nonZeroPresence
	}
	if fd.IsMap() {
		val, ok := makeField(fd.MapValue(), made)
		if !ok {
			return nil, false
		}
		f.mapVal, f.keyOrder = val, keyOrder(fd.MapKey().Kind())
		return f, true
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		f.kind = kindBool
	case protoreflect.StringKind:
		f.kind = kindString
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		f.kind = kindInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		f.kind = kindUint32
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		f.kind = kindInt64
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		f.kind = kindUint64
	case protoreflect.FloatKind:
		f.kind = kindFloat
	case protoreflect.DoubleKind:
		f.kind = kindDouble
	case protoreflect.BytesKind:
		f.kind = kindBytes
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			f.kind = kindNull
		} else {
			f.kind, f.enum = kindEnum, makeEnumNames(fd.Enum())
		}
	case protoreflect.MessageKind:
		f.kind, f.msg = kindMessage, makePlan(fd.Message(), made)
	default: // groups
		return nil, false
	}
	return f, true
}

// keyOrder returns protojson's order of map keys of a kind: false before
// true, numbers ascending, strings by bytes.
func keyOrder(k protoreflect.Kind) func(a, b protoreflect.MapKey) int {
	switch k {
	case protoreflect.BoolKind:
		return func(a, b protoreflect.MapKey) int {
			return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool()))
		}
	case protoreflect.StringKind:
		return func(a, b protoreflect.MapKey) int { return cmp.Compare(a.String(), b.String()) }
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return func(a, b protoreflect.MapKey) int { return cmp.Compare(a.Uint(), b.Uint()) }
	default:
		return func(a, b protoreflect.MapKey) int { return cmp.Compare(a.Int(), b.Int()) }
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enumNames holds an enum's value names, quoted, by number.
type enumNames struct {
	ed protoreflect.EnumDescriptor
	// quoted is by number, for the numbers from 0 up to a bound; empty
	// where no value has the number.
	quoted []string
}

// maxDenseEnum bounds the numbers enumNames keeps by number; beyond, it
// looks values up in the descriptor.
const maxDenseEnum = 256

func makeEnumNames(ed protoreflect.EnumDescriptor) *enumNames {
	n := &enumNames{ed: ed}
	values := ed.Values()
	top := -1
	for i := range values.Len() {
		if num := int(values.Get(i).Number()); num >= 0 && num < maxDenseEnum {
			top = max(top, num)
		}
	}
	n.quoted = make([]string, top+1)
	for num := range n.quoted {
		if v := values.ByNumber(protoreflect.EnumNumber(num)); v != nil {
			n.quoted[num] = strconv.Quote(string(v.Name()))
		}
	}
	return n
}

// append writes num as protojson does: its value's name (the first
// declared with the number), or the number where it has none.
func (n *enumNames) append(b []byte, num protoreflect.EnumNumber) []byte {
	if num >= 0 && int(num) < len(n.quoted) && n.quoted[num] != "" {
		return append(b, n.quoted[num]...)
	}
	if v := n.ed.Values().ByNumber(num); v != nil {
		return append(append(append(b, '"'), v.Name()...), '"')
	}
	return strconv.AppendInt(b, int64(num), 10)
}
