package acpjson

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The oracle: the generic descriptor-driven decoder, from the values
// encoding/json parses (map[string]any, json.Number, ...) through
// protoreflect, that the decoder replaced. It is slow and simple, and the
// differential tests (oracle_fuzz_test.go) hold the decoder to it.
type oracle struct {
	version Version
}

// oracleDecode is Decode by the oracle.
func oracleDecode(data []byte, m proto.Message, v Version) error {
	obj, err := parseObject(data)
	if err != nil {
		return err
	}
	d := oracle{version: v}
	if u, ok := m.(*acpv2.SessionUpdate); ok {
		return d.sessionUpdate(obj, u)
	}
	return d.object(obj, m.ProtoReflect())
}

// sessionUpdate decodes the `update` member of a session/update.
func (d *oracle) sessionUpdate(obj map[string]any, u *acpv2.SessionUpdate) error {
	tag, hasTag := obj["sessionUpdate"]
	if !hasTag {
		if _, ok := obj["type"]; ok {
			norm, err := normaliseDraft(obj)
			if err != nil {
				return err
			}
			if norm == nil {
				u.Update = &acpv2.SessionUpdate_Unknown{Unknown: unknownUpdate(obj["type"], obj)}
				return nil
			}
			return (&oracle{version: V2}).sessionUpdate(norm, u)
		}
		return &Error{Path: "sessionUpdate", Reason: "missing: an update needs a sessionUpdate (or type) discriminator"}
	}
	s, ok := tag.(string)
	if !ok {
		return &Error{Path: "sessionUpdate", Reason: "want a string, got " + jsonKind(tag)}
	}
	dd := *d
	fd, known := updateTags[s]
	if s == "tool_call" {
		// v1 creation, and a v1 agent re-sending tool_call for a known id:
		// both are the v2 upsert, with v1's null meaning unchanged.
		fd, known = updateTags["tool_call_update"], true
		dd.version = V1
	}
	if !known {
		u.Update = &acpv2.SessionUpdate_Unknown{Unknown: unknownUpdate(s, obj)}
		return nil
	}
	m := u.ProtoReflect()
	child := m.NewField(fd).Message()
	if err := dd.fill(obj, []string{"sessionUpdate"}, oracleTarget{child, info(child.Descriptor())}); err != nil {
		return err
	}
	m.Set(fd, protoreflect.ValueOfMessage(child))
	return nil
}

func unknownUpdate(tag any, obj map[string]any) *acpv2.UnknownUpdate {
	s, _ := tag.(string)
	return &acpv2.UnknownUpdate{SessionUpdate: s, Body: toStruct(obj)}
}

// target is a message that members of one JSON object are decoded into.
type oracleTarget struct {
	m  protoreflect.Message
	in *msgInfo
}

// object decodes obj into m.
func (d *oracle) object(obj map[string]any, m protoreflect.Message) error {
	in := info(m.Descriptor())
	if in == nil {
		return &Error{Reason: fmt.Sprintf("%s is not an ACP type", m.Descriptor().FullName())}
	}
	if in.union != nil {
		d.union(obj, m, in)
		return nil
	}
	return d.fill(obj, nil, oracleTarget{m, in})
}

// union decodes a discriminated union. It never fails: an object whose
// discriminator is unknown, or whose variant does not decode, is kept whole
// in the union's unknown field.
func (d *oracle) union(obj map[string]any, m protoreflect.Message, in *msgInfo) {
	u := in.union
	tag, _ := obj[u.key].(string)
	v, ok := u.byTag[tag]
	if ok {
		child := m.NewField(v.field).Message()
		var err error
		if v.nested != "" {
			inner, isObj := obj[v.nested].(map[string]any)
			if !isObj {
				err = &Error{Reason: "variant is not an object"}
			} else if err = d.object(inner, child); err == nil {
				err = d.fill(obj, []string{u.key, v.nested}, oracleTarget{m, in})
			}
		} else {
			err = d.fill(obj, []string{u.key}, oracleTarget{child, info(child.Descriptor())}, oracleTarget{m, in})
		}
		if err == nil {
			m.Set(v.field, protoreflect.ValueOfMessage(child))
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			m.Clear(fd)
			return true
		})
	}
	m.Set(u.unknown, protoreflect.ValueOfMessage(toStruct(obj).ProtoReflect()))
}

// fill decodes the members of obj into the targets, skipping the members
// named in skip. Each member goes to the first target that models it;
// members no target models go to the `extra` of the first target that has
// one. A member whose value has the wrong shape is kept in that `extra` too,
// so nothing is lost, unless its field is required or no target has extra.
func (d *oracle) fill(obj map[string]any, skip []string, ts ...oracleTarget) error {
	var extraOf *oracleTarget
	for i := range ts {
		if ts[i].in.extra != nil {
			extraOf = &ts[i]
			break
		}
	}
	var extra map[string]any
	keep := func(key string, val any) {
		if extraOf == nil {
			return
		}
		if extra == nil {
			extra = map[string]any{}
		}
		extra[key] = val
	}
members:
	for key, val := range obj {
		if slices.Contains(skip, key) {
			continue
		}
		for _, t := range ts {
			fd := d.fieldFor(t.in, key)
			if fd == nil {
				continue
			}
			if err := d.member(t.m, t.in, fd, val); err != nil {
				if extraOf == nil || slices.Contains(t.in.required, fd) {
					return within(err, key)
				}
				keep(key, val)
			}
			continue members
		}
		keep(key, val)
	}
	for _, t := range ts {
		for _, fd := range t.in.required {
			if !t.m.Has(fd) {
				return &Error{Path: t.in.keys[fd.Number()], Reason: "required"}
			}
		}
	}
	if extra != nil {
		extraOf.m.Set(extraOf.in.extra, protoreflect.ValueOfMessage(toStruct(extra).ProtoReflect()))
	}
	return nil
}

// fieldFor returns the field that models ACP member key, or nil.
func (d *oracle) fieldFor(in *msgInfo, key string) protoreflect.FieldDescriptor {
	if fd, ok := in.byKey[key]; ok {
		return fd
	}
	switch {
	case in.desc == mdSessionConfigOption && key == "configId":
		return in.byKey["id"]
	case in.desc == mdEmbeddedResource && key == "resource":
		return in.desc.Fields().ByName("text_resource")
	}
	return nil
}

// member decodes one member's value into field fd of m.
func (d *oracle) member(m protoreflect.Message, in *msgInfo, fd protoreflect.FieldDescriptor, val any) error {
	if in.desc == mdEmbeddedResource && fd.ContainingOneof() != nil {
		obj, ok := val.(map[string]any)
		if !ok {
			return &Error{Reason: "want an object, got " + jsonKind(val)}
		}
		if _, isBlob := obj["blob"]; isBlob {
			fd = in.desc.Fields().ByName("blob_resource")
		}
	}
	if val == nil {
		if fd.Message() != nil && info(fd.Message()) != nil && info(fd.Message()).patch != nil {
			if d.version == V1 && in.desc == mdToolCallUpdate {
				return nil // v1 has no clear: null means unchanged
			}
			p := m.NewField(fd).Message()
			p.Set(p.Descriptor().Fields().ByName("clear"), protoreflect.ValueOfEnum(0))
			m.Set(fd, protoreflect.ValueOfMessage(p))
		}
		return nil // elsewhere null is the same as omitted
	}
	if fd.IsList() {
		arr, ok := val.([]any)
		if !ok {
			return &Error{Reason: "want an array, got " + jsonKind(val)}
		}
		list := m.NewField(fd).List()
		for i, item := range arr {
			v, err := d.scalar(list.NewElement, fd, item)
			if err != nil {
				return within(err, "["+strconv.Itoa(i)+"]")
			}
			list.Append(v)
		}
		m.Set(fd, protoreflect.ValueOfList(list))
		return nil
	}
	v, err := d.scalar(func() protoreflect.Value { return m.NewField(fd) }, fd, val)
	if err != nil {
		return err
	}
	m.Set(fd, v)
	return nil
}

// scalar decodes one value of fd's kind (one element, for a list).
func (d *oracle) scalar(newMsg func() protoreflect.Value, fd protoreflect.FieldDescriptor, val any) (protoreflect.Value, error) {
	bad := func(want string) (protoreflect.Value, error) {
		return protoreflect.Value{}, &Error{Reason: "want " + want + ", got " + jsonKind(val)}
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		s, ok := val.(string)
		if !ok {
			return bad("a string")
		}
		return protoreflect.ValueOfString(s), nil
	case protoreflect.BoolKind:
		b, ok := val.(bool)
		if !ok {
			return bad("a boolean")
		}
		return protoreflect.ValueOfBool(b), nil
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		n, ok := val.(json.Number)
		if !ok {
			return bad("a number")
		}
		bits := 64
		if fd.Kind() == protoreflect.Uint32Kind {
			bits = 32
		}
		u, err := strconv.ParseUint(string(n), 10, bits)
		if err != nil {
			return bad(fmt.Sprintf("a %d-bit unsigned integer", bits))
		}
		if bits == 32 {
			return protoreflect.ValueOfUint32(uint32(u)), nil
		}
		return protoreflect.ValueOfUint64(u), nil
	case protoreflect.Int64Kind:
		n, ok := val.(json.Number)
		if !ok {
			return bad("a number")
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return bad("a 64-bit integer")
		}
		return protoreflect.ValueOfInt64(i), nil
	case protoreflect.DoubleKind:
		n, ok := val.(json.Number)
		if !ok {
			return bad("a number")
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || math.IsInf(f, 0) {
			return bad("a finite number")
		}
		return protoreflect.ValueOfFloat64(f), nil
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Value":
			return protoreflect.ValueOfMessage(toValue(val).ProtoReflect()), nil
		case "google.protobuf.Struct":
			obj, ok := val.(map[string]any)
			if !ok {
				return bad("an object")
			}
			return protoreflect.ValueOfMessage(toStruct(obj).ProtoReflect()), nil
		}
		v := newMsg()
		child := v.Message()
		in := info(child.Descriptor())
		if in != nil && in.patch != nil {
			if err := d.patchValue(child, in.patch, val); err != nil {
				return protoreflect.Value{}, err
			}
			return v, nil
		}
		obj, ok := val.(map[string]any)
		if !ok {
			return bad("an object")
		}
		if err := d.object(obj, child); err != nil {
			return protoreflect.Value{}, err
		}
		return v, nil
	}
	return protoreflect.Value{}, &Error{Reason: fmt.Sprintf("unsupported field kind %v", fd.Kind())}
}

// patchValue sets the `value` case of a tri-state wrapper from a non-null
// JSON value. A wrapper around a list message takes a JSON array.
func (d *oracle) patchValue(p protoreflect.Message, vf protoreflect.FieldDescriptor, val any) error {
	if vf.Kind() == protoreflect.MessageKind {
		if items := vf.Message().Fields().ByName("items"); items != nil && items.IsList() {
			list := p.NewField(vf).Message()
			in := info(list.Descriptor())
			if err := d.member(list, in, items, val); err != nil {
				return err
			}
			p.Set(vf, protoreflect.ValueOfMessage(list))
			return nil
		}
	}
	v, err := d.scalar(func() protoreflect.Value { return p.NewField(vf) }, vf, val)
	if err != nil {
		return err
	}
	p.Set(vf, v)
	return nil
}

// parseObject parses the JSON object data into encoding/json's generic
// form, with Decode's errors, for the oracle.
func parseObject(data []byte) (map[string]any, error) {
	v, trailing, err := parseStd(data)
	switch {
	case err != nil:
		return nil, &Error{Reason: "not valid JSON: " + err.Error()}
	case trailing:
		return nil, &Error{Reason: "trailing data after the JSON object"}
	case deeper(v, MaxDepth):
		return nil, tooDeep()
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Reason: fmt.Sprintf("want a JSON object, got %s", jsonKind(v))}
	}
	return obj, nil
}
