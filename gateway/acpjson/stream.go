package acpjson

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"unsafe"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The decoder: ACP JSON read token by token (reader) into the generated
// messages through the tables (tables.go). Each member is decoded where it
// stands; one whose value has a shape its field cannot take is read to its
// end and kept, decoded from its bytes, in the message's `extra`, as a
// union whose variant does not decode is kept whole in its `unknown`.
// What needs to see a whole object before deciding (a discriminator that
// is not the first member, or comes twice; an embedded resource's `blob`;
// the draft dialect) is decoded again from the object's bytes.

// decoder decodes for an agent that negotiated version.
type decoder struct {
	version Version
}

// errRetry is returned by a union or update decoded in a stream when its
// discriminator comes again: it is then decoded from its bytes.
var errRetry = errors.New("acpjson: discriminator given twice")

// semantic reports whether err is ACP's (a member of the wrong shape), not
// the JSON's.
func semantic(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	return errors.As(err, &e)
}

// target is a message that members of one JSON object are decoded into.
type target struct {
	p unsafe.Pointer
	t *table
}

// update decodes the update object at r into u.
//
// *u may be nil: the update is then allocated with its case, in one
// object, and *u set.
func (d decoder) update(r *reader, u **acpv2.SessionUpdate) error {
	start, d0 := r.offset(), r.depth()
	if r.kind() != '{' {
		return d.notObject(r)
	}
	if err := r.open(); err != nil {
		return err
	}
	err := errRetry
	if more, merr := r.more(); merr != nil {
		return merr
	} else if more {
		name, nerr := r.name()
		if nerr != nil {
			return nerr
		}
		if string(name) == "sessionUpdate" && r.kind() == '"' {
			tag, serr := r.str()
			if serr != nil {
				return serr
			}
			err = d.tagged(r, tag, u, true)
		}
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, errRetry) && !semantic(err) {
		return err
	}
	// The update again from its bytes: its discriminator first, the last
	// given winning.
	raw, ferr := r.finish(start, d0)
	if ferr != nil {
		return ferr
	}
	if !errors.Is(err, errRetry) {
		return err
	}
	if *u == nil {
		*u = &acpv2.SessionUpdate{}
	} else {
		**u = acpv2.SessionUpdate{}
	}
	sub := getReader(raw, r.limit-d0)
	defer putReader(sub)
	return d.updateBytes(sub, raw, u)
}

// notObject is the error of an update that is not an object.
func (d decoder) notObject(r *reader) error {
	v, err := r.value()
	if err != nil {
		return err
	}
	return &Error{Reason: "want a JSON object, got " + pbKind(v)}
}

// updateBytes decodes the update object raw, read by r from its start.
func (d decoder) updateBytes(r *reader, raw []byte, u **acpv2.SessionUpdate) error {
	tag, tagKind, hasTag, typ, err := discriminators(raw)
	if err != nil {
		return err
	}
	switch {
	case !hasTag && typ:
		return d.draft(r, raw, u)
	case !hasTag:
		return &Error{Path: "sessionUpdate", Reason: "missing: an update needs a sessionUpdate (or type) discriminator"}
	case tag == nil:
		return &Error{Path: "sessionUpdate", Reason: "want a string, got " + kindName(tagKind)}
	}
	if err := r.open(); err != nil {
		return err
	}
	return d.tagged(r, *tag, u, false)
}

// discriminators scans the object raw for its last sessionUpdate member
// (tag, nil when it is not a string) and whether it has a type member.
func discriminators(raw []byte) (tag *string, tagKind Kind, hasTag, typ bool, err error) {
	r := getReader(raw, math.MaxInt)
	defer putReader(r)
	if err := r.open(); err != nil {
		return nil, 0, false, false, err
	}
	for {
		more, err := r.more()
		if err != nil {
			return nil, 0, false, false, err
		}
		if !more {
			return tag, tagKind, hasTag, typ, nil
		}
		name, err := r.name()
		if err != nil {
			return nil, 0, false, false, err
		}
		switch string(name) {
		case "sessionUpdate":
			hasTag, tag, tagKind = true, nil, r.kind()
			if tagKind == '"' {
				s, err := r.str()
				if err != nil {
					return nil, 0, false, false, err
				}
				tag = &s
				continue
			}
		case "type":
			typ = true
		}
		if err := r.skip(); err != nil {
			return nil, 0, false, false, err
		}
	}
}

// tagged decodes the members after the discriminator of an update whose
// sessionUpdate is tag; the reader is inside the object.
func (d decoder) tagged(r *reader, tag string, u **acpv2.SessionUpdate, retry bool) error {
	e, known := updateCases[tag]
	dd := d
	if tag == "tool_call" {
		// v1 creation, and a v1 agent re-sending tool_call for a known id:
		// both are the v2 upsert, with v1's null meaning unchanged.
		e, known, dd.version = updateCases["tool_call_update"], true, V1
	}
	if !known {
		body, err := r.restOfObject(tag, retry)
		if err != nil {
			return err
		}
		if *u == nil {
			*u = &acpv2.SessionUpdate{}
		}
		(*u).Update = &acpv2.SessionUpdate_Unknown{Unknown: &acpv2.UnknownUpdate{SessionUpdate: tag, Body: body}}
		return nil
	}
	var child unsafe.Pointer
	if *u == nil {
		var p unsafe.Pointer
		p, child = tableOf(mdSessionUpdate).newWithCase(e)
		*u = (*acpv2.SessionUpdate)(p)
	} else {
		child = e.oneof.set(unsafe.Pointer(*u), e.off)
	}
	return dd.fill(r, "sessionUpdate", "", retry, target{child, e.sub}, target{})
}

// restOfObject reads the rest of an object whose first member was
// sessionUpdate, with value tag, into a Struct holding both. With retry,
// another sessionUpdate makes it return errRetry, else it is skipped.
func (r *reader) restOfObject(tag string, retry bool) (*structpb.Struct, error) {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if err := r.structMembers(s, "sessionUpdate", retry); err != nil {
		return nil, err
	}
	s.Fields["sessionUpdate"] = newPBString(tag)
	return s, nil
}

// draft decodes an update of the draft dialect, raw, as the v2 update
// normaliseDraft makes of it.
func (d decoder) draft(r *reader, raw []byte, u **acpv2.SessionUpdate) error {
	v, _, err := parseStd(raw)
	obj, ok := v.(map[string]any)
	if err != nil || !ok {
		return errSyntax
	}
	norm, err := normaliseDraft(obj)
	if err != nil {
		return err
	}
	if norm == nil {
		body, err := r.structOf(raw, 0)
		if err != nil {
			return err
		}
		typ, _ := obj["type"].(string)
		(*u).Update = &acpv2.SessionUpdate_Unknown{Unknown: &acpv2.UnknownUpdate{SessionUpdate: typ, Body: body}}
		return nil
	}
	sub := getReader([]byte(jsonText(norm)), r.limit)
	defer putReader(sub)
	return decoder{version: V2}.update(sub, u)
}

// fill decodes the members of the object at r, whose '{' was read, into
// the targets (t2 may be none), but the members named skip1 and skip2:
// with retry, one of those makes it return errRetry, else it is skipped.
// Each member goes to the first target that models it; members no target
// models go to the `extra` of the first target that has one. A member
// whose value has the wrong shape is kept in that `extra` too, so nothing
// is lost, unless its field is required or no target has extra.
func (d decoder) fill(r *reader, skip1, skip2 string, retry bool, t1, t2 target) error {
	f := filler{d: d, r: r, ts: [2]target{t1, t2}}
	return f.fill(skip1, skip2, retry)
}

// fill is decoder.fill, by f.
func (f *filler) fill(skip1, skip2 string, retry bool) error {
	r := f.r
	f.init()
	for {
		more, err := r.more()
		if err != nil {
			return err
		}
		if !more {
			return f.end()
		}
		name, err := r.name()
		if err != nil {
			return err
		}
		switch {
		case skip1 != "" && string(name) == skip1 || skip2 != "" && string(name) == skip2:
			if retry {
				return errRetry
			}
			err = r.skip()
		case f.nested != "" && string(name) == f.nested:
			if r.kind() != '{' {
				return f.d.bad(r, "an object")
			}
			f.held.t.zero(f.held.p)
			err = f.d.object(r, f.held.t, f.held.p)
			f.found = true
		default:
			err = f.member(name)
		}
		if err != nil {
			return err
		}
	}
}

// filler decodes the members of one object into its targets.
type filler struct {
	d       decoder
	r       *reader
	ts      [2]target
	extraOf int // the index in ts of the target with extra, or -1
	extra   *structpb.Struct
	// nested is the member that holds a nested union variant (see
	// nestedVariant), decoded into held; found is set once it is.
	nested string
	held   target
	found  bool
	// failed holds the members whose value could not be taken, in the
	// order met: an error only once the object ends, since a member
	// given again later replaces the one before (the last one wins).
	failed []failure
}

// failure is a member's value that could not be taken: the error it
// gives if no later member of the same name replaces it.
type failure struct {
	e   *entry
	err error
}

// settle records how member e's latest value went: err when it could
// not be taken, nil when it was (or was kept in extra), which forgets
// an earlier value's failure.
func (f *filler) settle(e *entry, err error) {
	f.failed = slices.DeleteFunc(f.failed, func(x failure) bool { return x.e == e })
	if err != nil {
		f.failed = append(f.failed, failure{e, err})
	}
}

func (f *filler) init() {
	f.extraOf = -1
	for i := range f.ts {
		if f.ts[i].t != nil && f.ts[i].t.hasExtra {
			f.extraOf = i
			return
		}
	}
}

func (f *filler) keep(key string, v *structpb.Value) {
	if f.extra == nil {
		f.extra = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	f.extra.Fields[key] = v
}

// member decodes the member named name, whose value is next.
func (f *filler) member(name []byte) error {
	r, d := f.r, f.d
	for _, t := range f.ts {
		if t.t == nil {
			continue
		}
		e := t.t.lookup(name)
		if e == nil {
			continue
		}
		if f.extra != nil {
			delete(f.extra.Fields, string(name))
		}
		d.clear(t, e)
		start, d0 := r.offset(), r.depth()
		err := d.member(r, t, e)
		if err == nil || !semantic(err) {
			if err == nil && f.failed != nil {
				f.settle(e, nil)
			}
			return err
		}
		d.clear(t, e)
		key := r.key(name)
		raw, ferr := r.finish(start, d0)
		if ferr != nil {
			return ferr
		}
		if f.extraOf < 0 || e.required {
			f.settle(e, within(err, key))
			return nil
		}
		v, verr := r.valueOf(raw, d0)
		if verr != nil {
			return verr
		}
		if f.failed != nil {
			f.settle(e, nil)
		}
		f.keep(key, v)
		return nil
	}
	if f.extraOf < 0 {
		return r.skip()
	}
	key := r.key(name)
	v, err := r.value()
	if err != nil {
		return err
	}
	f.keep(key, v)
	return nil
}

// end checks the targets' required fields and sets extra.
func (f *filler) end() error {
	if len(f.failed) > 0 {
		return f.failed[0].err
	}
	for _, t := range f.ts {
		if t.t == nil {
			continue
		}
		for _, e := range t.t.required {
			if !has(t.p, e) {
				return &Error{Path: e.key, Reason: "required"}
			}
		}
	}
	if f.extra != nil && len(f.extra.Fields) > 0 {
		t := f.ts[f.extraOf]
		*structAt(t.p, t.t.extraOff) = f.extra
	}
	return nil
}

// has reports whether field e of the message at p is set, as
// protoreflect's Has does.
func has(p unsafe.Pointer, e *entry) bool {
	f := unsafe.Add(p, e.off)
	switch {
	case e.list:
		return (*[3]uintptr)(f)[1] != 0
	case e.kind == kString && !e.opt:
		return *(*string)(f) != ""
	}
	return *(*unsafe.Pointer)(f) != nil // messages and optional scalars
}

// clear unsets field e of t's message.
func (d decoder) clear(t target, e *entry) {
	f := unsafe.Add(t.p, e.off)
	switch {
	case e.resource:
		*(*[2]unsafe.Pointer)(f) = [2]unsafe.Pointer{}
	case e.list:
		*(*[3]uintptr)(f) = [3]uintptr{}
	case e.opt || e.kind == kMessage || e.kind == kValue || e.kind == kStruct:
		*(*unsafe.Pointer)(f) = nil
	case e.kind == kString:
		*(*string)(f) = ""
	case e.kind == kBool:
		*(*bool)(f) = false
	case e.kind == kUint32:
		*(*uint32)(f) = 0
	case e.kind == kUint64:
		*(*uint64)(f) = 0
	case e.kind == kInt64:
		*(*int64)(f) = 0
	case e.kind == kDouble:
		*(*float64)(f) = 0
	}
}

// member decodes one member's value into field e of t's message.
func (d decoder) member(r *reader, t target, e *entry) error {
	if e.resource {
		return d.resource(r, t, e)
	}
	if r.kind() == 'n' {
		if _, err := r.scalar(); err != nil {
			return err
		}
		if e.list || e.kind != kMessage {
			return nil
		}
		if e.patch {
			if d.version == V1 && t.t.in.desc == mdToolCallUpdate {
				return nil // v1 has no clear: null means unchanged
			}
			p, _ := e.sub.newWithCase(e.sub.clear)
			*(*unsafe.Pointer)(unsafe.Add(t.p, e.off)) = p
		}
		return nil // elsewhere null is the same as omitted
	}
	f := unsafe.Add(t.p, e.off)
	if e.list {
		return d.list(r, &e.slot, f)
	}
	if e.patch {
		p, err := d.patch(r, e.sub)
		if err != nil {
			return err
		}
		*(*unsafe.Pointer)(f) = p
		return nil
	}
	return d.scalar(r, &e.slot, f)
}

// list decodes an array into the slice at f.
func (d decoder) list(r *reader, s *slot, f unsafe.Pointer) error {
	if k := r.kind(); k != '[' {
		return d.bad(r, "an array")
	}
	if err := r.open(); err != nil {
		return err
	}
	elem := *s
	elem.list = false
	if s.kind == kString {
		v, err := items[string](d, r, &elem)
		*(*[]string)(f) = v
		return err
	}
	v, err := items[unsafe.Pointer](d, r, &elem) // messages: []*T
	*(*[]unsafe.Pointer)(f) = v
	return err
}

// items decodes the elements of the array being read, each of elem's
// kind, into a slice of T, elem's Go type.
func items[T any](d decoder, r *reader, elem *slot) ([]T, error) {
	var buf [4]T
	out := buf[:0]
	for i := 0; ; i++ {
		more, err := r.more()
		if err != nil {
			return nil, err
		}
		if !more {
			return append(make([]T, 0, len(out)), out...), nil
		}
		var v T
		if err := d.scalar(r, elem, unsafe.Pointer(&v)); err != nil {
			return nil, within(err, "["+strconv.Itoa(i)+"]")
		}
		out = append(out, v)
	}
}

// bad is the error of a value of the wrong shape: want is the shape the
// field takes. The value is not read.
func (d decoder) bad(r *reader, want string) error {
	k := r.kind()
	if k == 0 {
		return errSyntax
	}
	return &Error{Reason: "want " + want + ", got " + kindName(k)}
}

// kindName names the kind of a JSON value, as errors do.
func kindName(k Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "a number"
}

// Error paths: the decoding functions do not know where in the document
// they are. An *Error they return has a Path relative to the value they
// were given ("" for that value itself), and each caller prefixes it with
// the member name or index it passed down (see within), so that a path is
// only built for an error that is returned.

// within returns err with its path made relative to the value one level up:
// elem is the member name or the index ("[2]") under which err occurred.
func within(err error, elem string) error {
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.Path == "":
			e.Path = elem
		case e.Path[0] == '[':
			e.Path = elem + e.Path
		default:
			e.Path = elem + "." + e.Path
		}
	}
	return err
}

// scalar decodes one value of s's kind (one element, for a list) and
// writes it at f, the field, or an element of its list.
func (d decoder) scalar(r *reader, s *slot, f unsafe.Pointer) error {
	k := r.kind()
	switch s.kind {
	case kString:
		if k != '"' {
			return d.bad(r, "a string")
		}
		v, err := r.str()
		if err != nil {
			return err
		}
		if s.opt {
			p := new(string)
			*p = v
			*(**string)(f) = p
		} else {
			*(*string)(f) = v
		}
		return nil
	case kBool:
		if k != 't' && k != 'f' {
			return d.bad(r, "a boolean")
		}
		b, err := r.scalar()
		if err != nil {
			return err
		}
		v := b[0] == 't'
		if s.opt {
			p := new(bool)
			*p = v
			*(**bool)(f) = p
		} else {
			*(*bool)(f) = v
		}
		return nil
	case kUint32, kUint64, kInt64, kDouble:
		if k != '0' {
			return d.bad(r, "a number")
		}
		b, err := r.scalar()
		if err != nil {
			return err
		}
		return number(s, b, f)
	case kValue:
		v, err := r.value()
		if err != nil {
			return err
		}
		*(**structpb.Value)(f) = v
		return nil
	case kStruct:
		if k != '{' {
			return d.bad(r, "an object")
		}
		v, err := r.object()
		if err != nil {
			return err
		}
		*(**structpb.Struct)(f) = v
		return nil
	case kMessage:
		if s.sub.in.patch != nil {
			p, err := d.patch(r, s.sub)
			if err != nil {
				return err
			}
			*(*unsafe.Pointer)(f) = p
			return nil
		}
		if k != '{' {
			return d.bad(r, "an object")
		}
		if s.sub.in.union != nil {
			p, err := d.union(r, s.sub, nil)
			if err != nil {
				return err
			}
			*(*unsafe.Pointer)(f) = p
			return nil
		}
		p := s.sub.newMessage()
		if err := d.object(r, s.sub, p); err != nil {
			return err
		}
		*(*unsafe.Pointer)(f) = p
		return nil
	}
	return &Error{Reason: "unsupported field kind"}
}

// number writes the JSON number b at f as s's kind.
func number(s *slot, b []byte, f unsafe.Pointer) error {
	switch s.kind {
	case kUint32, kUint64:
		bits := 64
		if s.kind == kUint32 {
			bits = 32
		}
		u, err := strconv.ParseUint(string(b), 10, bits)
		if err != nil {
			return &Error{Reason: "want a " + strconv.Itoa(bits) + "-bit unsigned integer, got a number"}
		}
		if bits == 32 {
			v := uint32(u)
			if s.opt {
				p := new(uint32)
				*p = v
				*(**uint32)(f) = p
			} else {
				*(*uint32)(f) = v
			}
		} else if s.opt {
			p := new(uint64)
			*p = u
			*(**uint64)(f) = p
		} else {
			*(*uint64)(f) = u
		}
	case kInt64:
		i, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return &Error{Reason: "want a 64-bit integer, got a number"}
		}
		if s.opt {
			p := new(int64)
			*p = i
			*(**int64)(f) = p
		} else {
			*(*int64)(f) = i
		}
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		if err != nil || math.IsInf(v, 0) {
			return &Error{Reason: "want a finite number, got a number"}
		}
		if s.opt {
			p := new(float64)
			*p = v
			*(**float64)(f) = p
		} else {
			*(*float64)(f) = v
		}
	}
	return nil
}

// patch decodes a non-null JSON value into a new tri-state wrapper of
// table pt, set to that value. A wrapper around a list message takes a
// JSON array.
func (d decoder) patch(r *reader, pt *table) (unsafe.Pointer, error) {
	vc := pt.value
	switch vc.kind {
	case kMessage:
		if vc.sub.items != nil {
			if r.kind() != '[' {
				return nil, d.bad(r, "an array")
			}
			p, l := pt.newWithCase(vc)
			return p, d.list(r, &vc.sub.items.slot, unsafe.Add(l, vc.sub.items.off))
		}
		if r.kind() != '{' {
			return nil, d.bad(r, "an object")
		}
		p, m := pt.newWithCase(vc)
		return p, d.object(r, vc.sub, m)
	case kString:
		var v string
		if err := d.scalar(r, &vc.slot, unsafe.Pointer(&v)); err != nil {
			return nil, err
		}
		p, w := pt.newWithCase(vc)
		*(*string)(w) = v
		return p, nil
	case kStruct:
		if r.kind() != '{' {
			return nil, d.bad(r, "an object")
		}
		p, m := pt.newWithCase(vc)
		return p, r.fields((*structpb.Struct)(m))
	case kValue:
		var v unsafe.Pointer
		if err := d.scalar(r, &vc.slot, unsafe.Pointer(&v)); err != nil {
			return nil, err
		}
		p, w := pt.newWithCase(vc)
		*(*unsafe.Pointer)(w) = v
		return p, nil
	}
	return nil, &Error{Reason: "unsupported patch value"}
}

// document decodes the document at r, which is to be one JSON object,
// into the message at p of table t.
func (d decoder) document(r *reader, t *table, p unsafe.Pointer) error {
	if r.kind() != '{' {
		return d.notObject(r)
	}
	if err := d.object(r, t, p); err != nil {
		return err
	}
	if !r.end() {
		return errSyntax
	}
	return nil
}

// object decodes the object at r into the message at p of table t.
func (d decoder) object(r *reader, t *table, p unsafe.Pointer) error {
	if t.in.union != nil {
		_, err := d.union(r, t, p)
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	return d.fill(r, "", "", false, target{p, t}, target{})
}

// union decodes a discriminated union into the message at p, or when p
// is nil into a new one, allocated with its case, that it returns. It
// never fails on what the JSON holds: an object whose discriminator is
// unknown, or whose variant does not decode, is kept whole in the union's
// unknown field.
func (d decoder) union(r *reader, t *table, p unsafe.Pointer) (unsafe.Pointer, error) {
	start, d0 := r.offset(), r.depth()
	q, err := d.unionStream(r, t, p)
	if err == nil || !errors.Is(err, errRetry) && !semantic(err) {
		return q, err
	}
	raw, err := r.finish(start, d0)
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = t.newMessage()
	} else {
		t.zero(p)
	}
	tag, err := lastString(raw, t.in.union.key)
	if err != nil {
		return nil, err
	}
	if _, known := t.in.union.byTag[tag]; known {
		sub := getReader(raw, r.limit-d0)
		err = sub.open()
		if err == nil {
			_, err = d.variant(sub, t, p, tag, false)
		}
		putReader(sub)
		if err == nil || !semantic(err) {
			return p, err
		}
		t.zero(p)
	}
	body, err := r.structOf(raw, d0)
	if err != nil {
		return nil, err
	}
	t.unknown.oneof.setPtr(p, t.unknown.off, unsafe.Pointer(body))
	return p, nil
}

// unionStream decodes a union whose discriminator is its first member,
// or returns errRetry.
func (d decoder) unionStream(r *reader, t *table, p unsafe.Pointer) (unsafe.Pointer, error) {
	if err := r.open(); err != nil {
		return nil, err
	}
	more, err := r.more()
	if err != nil || !more {
		if err == nil {
			err = errRetry
		}
		return nil, err
	}
	name, err := r.name()
	if err != nil {
		return nil, err
	}
	if string(name) != t.in.union.key || r.kind() != '"' {
		return nil, errRetry
	}
	tag, err := r.str()
	if err != nil {
		return nil, err
	}
	if _, known := t.in.union.byTag[tag]; !known {
		return nil, errRetry
	}
	return d.variant(r, t, p, tag, true)
}

// variant decodes the members of a union's object but its discriminator,
// whose value is tag, into the message at p (or a new one, when p is nil,
// allocated with the variant's case), returning the message. With retry,
// a discriminator given again makes it return errRetry, else it is
// skipped.
func (d decoder) variant(r *reader, t *table, p unsafe.Pointer, tag string, retry bool) (unsafe.Pointer, error) {
	u := t.in.union
	v := u.byTag[tag]
	e := t.cases[v.field.Number()]
	var child unsafe.Pointer
	if p == nil {
		p, child = t.newWithCase(e)
	} else {
		child = e.oneof.set(p, e.off)
	}
	if v.nested == "" {
		return p, d.fill(r, u.key, "", retry, target{child, e.sub}, target{p, t})
	}
	return p, d.nestedVariant(r, t, p, e, child, v.nested, retry)
}

// nestedVariant decodes a union object whose variant sits under member
// nested, the union's own members (meta, extra) beside it.
func (d decoder) nestedVariant(r *reader, t *table, p unsafe.Pointer, e *entry, child unsafe.Pointer, nested string, retry bool) error {
	f := filler{d: d, r: r, ts: [2]target{{p, t}}, nested: nested, held: target{child, e.sub}}
	if err := f.fill(t.in.union.key, "", retry); err != nil {
		return err
	}
	if !f.found {
		return &Error{Reason: "variant is not an object"}
	}
	return nil
}

// resource decodes EmbeddedResource's resource member: a text resource,
// or a blob resource when the object has a blob.
func (d decoder) resource(r *reader, t target, e *entry) error {
	if r.kind() != '{' {
		return d.bad(r, "an object")
	}
	d0 := r.depth()
	raw, err := r.finish(r.offset(), d0)
	if err != nil {
		return err
	}
	blob, err := hasMember(raw, "blob")
	if err != nil {
		return err
	}
	ce := e
	if blob {
		ce = t.t.blob
	}
	sub := getReader(raw, r.limit-d0)
	defer putReader(sub)
	child := ce.oneof.set(t.p, ce.off)
	return d.object(sub, ce.sub, child)
}

// hasMember reports whether the object raw has a member named name.
func hasMember(raw []byte, name string) (bool, error) {
	r := getReader(raw, math.MaxInt)
	defer putReader(r)
	found := false
	_, err := r.members(func(b []byte) (bool, error) {
		found = found || string(b) == name
		return true, r.skip()
	})
	return found, err
}

// lastMember returns the bytes of the last member named name of the
// object raw, or nil.
func lastMember(raw []byte, name string) ([]byte, error) {
	r := getReader(raw, math.MaxInt)
	defer putReader(r)
	var v []byte
	_, err := r.members(func(b []byte) (bool, error) {
		if string(b) != name {
			return true, r.skip()
		}
		var err error
		v, err = r.finish(r.offset(), r.depth())
		return true, err
	})
	return v, err
}

// lastString returns the last member named name of the object raw when
// it is a string, or "".
func lastString(raw []byte, name string) (string, error) {
	r := getReader(raw, math.MaxInt)
	defer putReader(r)
	var s string
	_, err := r.members(func(b []byte) (bool, error) {
		if string(b) != name {
			return true, r.skip()
		}
		s = ""
		if r.kind() != '"' {
			return true, r.skip()
		}
		var err error
		s, err = r.str()
		return true, err
	})
	if err != nil {
		return "", err
	}
	return s, nil
}

// pbKind names the JSON kind of a decoded value, as errors do.
func pbKind(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return "null"
	case *structpb.Value_BoolValue:
		return "a boolean"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_StringValue:
		return "a string"
	case *structpb.Value_ListValue:
		return "an array"
	}
	return "an object"
}
