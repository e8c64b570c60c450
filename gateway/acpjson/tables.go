package acpjson

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
)

// The decoder's tables: for each acp.v2 message, built once from its
// descriptor and its generated Go type, the ACP member names with, for
// each, where its field lies in the Go struct and how its value is
// decoded. The decoder writes through these (typed writes at the field's
// offset) rather than through protoreflect, which boxes every scalar and
// allocates every oneof wrapper on its own. A field added to the proto is
// in its message's table with no new code; a field of a shape the tables
// cannot write fails TestTablesCoverEveryField.

// keyEntry is an ACP member name and its entry.
type keyEntry struct {
	key string
	e   *entry
}

// lookup returns the entry of member name, or nil.
func (t *table) lookup(name []byte) *entry {
	for i := range t.keys {
		if k := &t.keys[i]; len(k.key) == len(name) && k.key == string(name) {
			return k.e
		}
	}
	return nil
}

// slotKind is how a value of one field (or one element of a list) is
// decoded and written.
type slotKind uint8

const (
	kUnsupported slotKind = iota
	kString
	kBool
	kUint32
	kUint64
	kInt64
	kDouble
	kNullEnum // google.protobuf.NullValue: the clear of a patch
	kMessage  // an ACP message, decoded by its table
	kValue    // google.protobuf.Value
	kStruct   // google.protobuf.Struct
)

// slot is the Go shape of a field: the kind of its values, and whether a
// value is held by pointer (proto3 optional), in a list, or in a oneof.
type slot struct {
	kind slotKind
	// sub is the table of a kMessage's message.
	sub *table
	// opt: the field is a pointer to its value (proto3 optional).
	opt bool
	// list: the field is a slice of values.
	list bool
	// oneof: the field is a case of a oneof, written through its wrapper.
	oneof *oneofCase
}

// oneofCase is one case of a oneof: the interface field of the message
// that holds it, and the generated wrapper type whose only field, at
// offset 0, holds the value.
type oneofCase struct {
	// itab is the interface's type word for the wrapper type, taken from
	// a message with the case set.
	itab    unsafe.Pointer
	wrapper reflect.Type
	// together is struct{W wrapper; M message} for a case holding a
	// message, so that both are allocated at once; mOff is M's offset.
	together reflect.Type
	mOff     uintptr
}

// entry is one ACP member of a message.
type entry struct {
	fd  protoreflect.FieldDescriptor
	key string
	// off is the offset of the field in the Go struct (of the oneof's
	// interface field for a oneof case).
	off uintptr
	slot
	required bool
	// patch is set for a field of a tri-state wrapper type: null is a
	// clear (but from a v1 ToolCallUpdate) rather than an omission.
	patch bool
	// alloc lays out the message with this case set, for a oneof case.
	alloc caseAlloc
	// resource is EmbeddedResource's `resource` member, whose field is
	// text_resource unless the object has a `blob`.
	resource bool
}

// table is what the decoder knows of one message type.
type table struct {
	in  *msgInfo
	typ reflect.Type // the struct type
	// keys is every ACP member by name (and by alias: configId), a list
	// searched (lookup) faster than a map for the few members of a message.
	keys []keyEntry
	// entries lists the ACP members' entries once each, in field order.
	entries []*entry
	// allEntries lists an entry for every field.
	allEntries []*entry
	// extraOff is the offset of the `extra` Struct pointer, if any.
	extraOff uintptr
	hasExtra bool
	required []*entry
	// union: the variants' cases, by field number, and the unknown case.
	cases   map[protoreflect.FieldNumber]*entry
	unknown *entry
	// patch: the clear and value cases of a tri-state wrapper.
	clear, value *entry
	// blob is EmbeddedResource's blob_resource case.
	blob *entry
	// items is the `items` list entry of a list message (ToolCallContentList).
	items *entry
}

var tables = map[protoreflect.FullName]*table{}

func tableOf(md protoreflect.MessageDescriptor) *table { return tables[md.FullName()] }

// buildTables makes the tables of every message in infos; schema.go's init
// calls it once infos is complete.
func buildTables() {
	for name, in := range infos {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
		if err != nil {
			panic("acpjson: no Go type for " + string(name))
		}
		tables[name] = &table{in: in, typ: reflect.TypeOf(mt.New().Interface()).Elem()}
	}
	for _, t := range tables {
		t.build()
	}
	for _, t := range tables {
		for _, e := range t.allEntries {
			if e.oneof != nil {
				t.layOut(e)
			}
		}
	}
	su := tables[mdSessionUpdate.FullName()]
	for tag, fd := range updateTags {
		updateCases[tag] = &entry{fd: fd, key: tag, off: fieldOffset(su.typ, fd), slot: slotOf(fd)}
		updateCases[tag].oneof = caseOf(su, fd)
		su.layOut(updateCases[tag])
	}
}

// updateCases are SessionUpdate's cases by their `sessionUpdate` tag.
var updateCases = map[string]*entry{}

func (t *table) build() {
	in := t.in
	fields := in.desc.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		e := &entry{fd: fd, key: in.keys[fd.Number()]}
		e.slot = slotOf(fd)
		e.off = fieldOffset(t.typ, fd)
		t.allEntries = append(t.allEntries, e)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			e.oneof = caseOf(t, fd)
		}
		if fm := fd.Message(); fm != nil && info(fm) != nil && info(fm).patch != nil {
			e.patch = true
		}
		switch {
		case fd == in.extra:
			t.extraOff, t.hasExtra = e.off, true
			continue
		case in.union != nil && fd.ContainingOneof() == in.union.oneof:
			if t.cases == nil {
				t.cases = map[protoreflect.FieldNumber]*entry{}
			}
			t.cases[fd.Number()] = e
			if fd == in.union.unknown {
				t.unknown = e
			}
			continue
		case in.patch != nil && fd.ContainingOneof() == in.patch.ContainingOneof():
			if fd == in.patch {
				t.value = e
			} else {
				t.clear = e
			}
			continue
		case in.desc == mdEmbeddedResource && fd.ContainingOneof() != nil:
			if fd.Name() == "blob_resource" {
				t.blob = e
			}
			if fd.Name() == "text_resource" {
				e.key, e.resource = "resource", true
				t.entries = append(t.entries, e)
			}
			continue
		case fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic():
			continue // not an ACP member (PermissionOutcome)
		}
		if _, member := in.keys[fd.Number()]; !member {
			continue // filled in by the gateway (gatewayOwned)
		}
		if fd.Name() == "items" && fd.IsList() {
			t.items = e
		}
		for _, r := range in.required {
			if r == fd {
				e.required = true
				t.required = append(t.required, e)
			}
		}
		t.entries = append(t.entries, e)
	}
	for _, e := range t.entries {
		t.keys = append(t.keys, keyEntry{e.key, e})
	}
	if in.desc == mdSessionConfigOption {
		t.keys = append(t.keys, keyEntry{"configId", t.lookup([]byte("id"))})
	}
}

// slotOf is the Go shape of fd's values.
func slotOf(fd protoreflect.FieldDescriptor) slot {
	s := slot{list: fd.IsList(), opt: fd.HasPresence() && fd.Kind() != protoreflect.MessageKind && fd.ContainingOneof() != nil && fd.ContainingOneof().IsSynthetic()}
	if fd.IsMap() {
		return slot{}
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		s.kind = kString
	case protoreflect.BoolKind:
		s.kind = kBool
	case protoreflect.Uint32Kind:
		s.kind = kUint32
	case protoreflect.Uint64Kind:
		s.kind = kUint64
	case protoreflect.Int64Kind:
		s.kind = kInt64
	case protoreflect.DoubleKind:
		s.kind = kDouble
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" && !s.list {
			s.kind = kNullEnum
		}
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Value":
			s.kind = kValue
		case "google.protobuf.Struct":
			s.kind = kStruct
		default:
			if info(fd.Message()) != nil {
				s.kind = kMessage
				s.sub = tables[fd.Message().FullName()]
			}
		}
	}
	if s.list && s.kind != kString && s.kind != kMessage && s.kind != kValue && s.kind != kStruct {
		s.kind = kUnsupported
	}
	return s
}

// fieldOffset is the offset in st of fd's Go field: the field whose
// protobuf tag names fd, or the interface field of fd's oneof.
func fieldOffset(st reflect.Type, fd protoreflect.FieldDescriptor) uintptr {
	od := fd.ContainingOneof()
	for i := 0; i < st.NumField(); i++ {
		sf := st.Field(i)
		if od != nil && !od.IsSynthetic() {
			if sf.Tag.Get("protobuf_oneof") == string(od.Name()) {
				return sf.Offset
			}
			continue
		}
		for _, part := range strings.Split(sf.Tag.Get("protobuf"), ",") {
			if part == "name="+string(fd.Name()) {
				return sf.Offset
			}
		}
	}
	panic(fmt.Sprintf("acpjson: no Go field for %s", fd.FullName()))
}

// caseOf finds the wrapper type and interface type word of a oneof case,
// by setting the case in a new message through protoreflect.
func caseOf(t *table, fd protoreflect.FieldDescriptor) *oneofCase {
	mt, _ := protoregistry.GlobalTypes.FindMessageByName(t.in.desc.FullName())
	m := mt.New()
	var v protoreflect.Value
	switch fd.Kind() {
	case protoreflect.MessageKind:
		v = m.NewField(fd)
	case protoreflect.StringKind:
		v = protoreflect.ValueOfString("")
	case protoreflect.BoolKind:
		v = protoreflect.ValueOfBool(false)
	case protoreflect.EnumKind:
		v = protoreflect.ValueOfEnum(0)
	default:
		return nil
	}
	m.Set(fd, v)
	p := reflect.ValueOf(m.Interface()).UnsafePointer()
	words := (*[2]unsafe.Pointer)(unsafe.Add(p, fieldOffset(t.typ, fd)))
	wrapper := reflect.ValueOf(proto.Message(m.Interface())).Elem().FieldByIndex(oneofIndex(t.typ, fd)).Elem().Type().Elem()
	c := &oneofCase{itab: words[0], wrapper: wrapper}
	if fd.Kind() == protoreflect.MessageKind {
		c.together = reflect.StructOf([]reflect.StructField{
			{Name: "W", Type: wrapper},
			{Name: "M", Type: wrapper.Field(0).Type.Elem()},
		})
		c.mOff = c.together.Field(1).Offset
	}
	return c
}

func oneofIndex(st reflect.Type, fd protoreflect.FieldDescriptor) []int {
	for i := 0; i < st.NumField(); i++ {
		if st.Field(i).Tag.Get("protobuf_oneof") == string(fd.ContainingOneof().Name()) {
			return []int{i}
		}
	}
	panic("acpjson: no oneof field for " + string(fd.FullName()))
}

// newMessage allocates a zero message of t's type.
func (t *table) newMessage() unsafe.Pointer { return reflect.New(t.typ).UnsafePointer() }

// zero clears the message at p.
func (t *table) zero(p unsafe.Pointer) { reflect.NewAt(t.typ, p).Elem().SetZero() }

// setCase sets the oneof case c of the message at p (its interface field
// at off), returning where the case's value is to be written. For a
// message case, the message is allocated with its wrapper and returned.
func (c *oneofCase) set(p unsafe.Pointer, off uintptr) (value unsafe.Pointer) {
	var w unsafe.Pointer
	if c.together != nil {
		w = reflect.New(c.together).UnsafePointer()
		m := unsafe.Add(w, c.mOff)
		*(*unsafe.Pointer)(w) = m
		value = m
	} else {
		w = reflect.New(c.wrapper).UnsafePointer()
		value = w
	}
	*(*[2]unsafe.Pointer)(unsafe.Add(p, off)) = [2]unsafe.Pointer{c.itab, w}
	return value
}

// setPtr sets the oneof case c of the message at p to the message v.
func (c *oneofCase) setPtr(p unsafe.Pointer, off uintptr, v unsafe.Pointer) {
	w := reflect.New(c.wrapper).UnsafePointer()
	*(*unsafe.Pointer)(w) = v
	*(*[2]unsafe.Pointer)(unsafe.Add(p, off)) = [2]unsafe.Pointer{c.itab, w}
}

// newWithCase allocates a message of table t with its oneof case c set:
// the message, the case's wrapper and, for a case holding a message, that
// message, in one object. It returns the message and where the case's
// value is to be written (the held message, for a message case but a
// google.protobuf.Value, whose pointer is written in the wrapper).
func (t *table) newWithCase(c *entry) (p, value unsafe.Pointer) {
	a := c.alloc
	p = reflect.New(a.typ).UnsafePointer()
	w := unsafe.Add(p, a.wOff)
	value = w
	if a.mOff != 0 {
		value = unsafe.Add(p, a.mOff)
		*(*unsafe.Pointer)(w) = value
	}
	*(*[2]unsafe.Pointer)(unsafe.Add(p, c.off)) = [2]unsafe.Pointer{c.oneof.itab, w}
	return p, value
}

// caseAlloc is the layout of a message allocated with one of its oneof
// cases (see newWithCase): struct{P message; W wrapper; M held message}.
type caseAlloc struct {
	typ        reflect.Type
	wOff, mOff uintptr
}

// layOut lays out the allocation of t's message with its case c.
func (t *table) layOut(c *entry) {
	// A google.protobuf.Value is made by the reader with its kind's
	// wrapper: the case holds that one.
	held := c.oneof.together != nil && c.kind != kValue
	fields := []reflect.StructField{{Name: "P", Type: t.typ}, {Name: "W", Type: c.oneof.wrapper}}
	if held {
		fields = append(fields, reflect.StructField{Name: "M", Type: c.oneof.together.Field(1).Type})
	}
	c.alloc.typ = reflect.StructOf(fields)
	c.alloc.wOff = c.alloc.typ.Field(1).Offset
	if held {
		c.alloc.mOff = c.alloc.typ.Field(2).Offset
	}
}

// structAt returns the Struct pointer field at p+off.
func structAt(p unsafe.Pointer, off uintptr) **structpb.Struct {
	return (**structpb.Struct)(unsafe.Add(p, off))
}
