package acpjson

import (
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/internal/together"
)

// Free-form JSON (rawInput, rawOutput, _meta, unknown members) is read
// straight into google.protobuf values. Each Value is allocated with its
// kind's oneof wrapper (and a Struct or list with its message) in one
// object (package together): structpb.NewStringValue and the like
// allocate each apart. Numbers become float64, as google.protobuf.Value
// requires; one beyond float64's range is kept as its digits.

// value reads the next value into a google.protobuf Value.
func (r *reader) value() (*structpb.Value, error) {
	switch r.kind() {
	case '{':
		v, s := together.Three(func(v *structpb.Value, k *structpb.Value_StructValue, s *structpb.Struct) {
			v.Kind, k.StructValue = k, s
		})
		return v, r.fields(s)
	case '[':
		return r.list()
	case '"':
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		return newPBString(s), nil
	}
	b, err := r.scalar()
	if err != nil {
		return nil, err
	}
	switch b[0] {
	case 'n':
		v, _ := together.Two(func(v *structpb.Value, k *structpb.Value_NullValue) { v.Kind = k })
		return v, nil
	case 't', 'f':
		v, k := together.Two(func(v *structpb.Value, k *structpb.Value_BoolValue) { v.Kind = k })
		k.BoolValue = b[0] == 't'
		return v, nil
	}
	f, ok := parseFloat(b)
	if !ok {
		return newPBString(string(b)), nil // out of float64's range: the digits
	}
	v, k := together.Two(func(v *structpb.Value, k *structpb.Value_NumberValue) { v.Kind = k })
	k.NumberValue = f
	return v, nil
}

// parseFloat parses a JSON number, reporting false when it is beyond
// float64's range.
func parseFloat(b []byte) (float64, bool) {
	if len(b) <= 15 {
		// Small integers, the commonest numbers, exactly and without
		// strconv's string.
		n := 0.0
		for _, c := range b {
			if c < '0' || c > '9' {
				goto slow
			}
			n = n*10 + float64(c-'0')
		}
		return n, true
	}
slow:
	f, err := strconv.ParseFloat(string(b), 64)
	return f, err == nil
}

// list reads an array into a google.protobuf Value.
func (r *reader) list() (*structpb.Value, error) {
	if err := r.open(); err != nil {
		return nil, err
	}
	val, l := together.Three(func(v *structpb.Value, k *structpb.Value_ListValue, l *structpb.ListValue) {
		v.Kind, k.ListValue = k, l
	})
	var buf [8]*structpb.Value
	vals := buf[:0]
	for {
		more, err := r.more()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	l.Values = make([]*structpb.Value, len(vals))
	copy(l.Values, vals)
	return val, nil
}

// object reads an object into a new google.protobuf Struct.
func (r *reader) object() (*structpb.Struct, error) {
	s := &structpb.Struct{}
	return s, r.fields(s)
}

// fields reads an object into s, the last of duplicate members winning.
func (r *reader) fields(s *structpb.Struct) error {
	if err := r.open(); err != nil {
		return err
	}
	s.Fields = map[string]*structpb.Value{}
	return r.structMembers(s, "", false)
}

// structMembers reads the rest of an object, whose '{' was read, into s, but
// the members named skip: with retry, one of those makes it return
// errRetry, else it is skipped.
func (r *reader) structMembers(s *structpb.Struct, skip string, retry bool) error {
	for {
		more, err := r.more()
		if err != nil || !more {
			return err
		}
		b, err := r.name()
		if err != nil {
			return err
		}
		if skip != "" && string(b) == skip {
			if retry {
				return errRetry
			}
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		k := r.key(b)
		v, err := r.value()
		if err != nil {
			return err
		}
		s.Fields[k] = v
	}
}

// newPBString returns a google.protobuf Value of s.
func newPBString(s string) *structpb.Value {
	v, k := together.Two(func(v *structpb.Value, k *structpb.Value_StringValue) { v.Kind = k })
	k.StringValue = s
	return v
}

// valueOf decodes the JSON value raw, read before at depth d0 of r.
func (r *reader) valueOf(raw []byte, d0 int) (*structpb.Value, error) {
	sub := getReader(raw, r.limit-d0)
	defer putReader(sub)
	return sub.value()
}

// structOf decodes the JSON object raw, read before at depth d0 of r.
func (r *reader) structOf(raw []byte, d0 int) (*structpb.Struct, error) {
	sub := getReader(raw, r.limit-d0)
	defer putReader(sub)
	return sub.object()
}
