package merge

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

// callWire is the protobuf encoding of an entry's current tool call, with
// the place in it of each message field, so that the next version's
// encoding marshals only the fields that changed: a merged tool call
// shares every unchanged field value with the version before it (see
// applyUpdate), and each of its updates made an event that carried it
// whole, rawInput and all, marshalled again.
type callWire struct {
	call  *acpv2.ToolCall
	b     []byte
	parts [numKinds][]part // by field: content, locations, then the singular ones
	// room, when not nil, is b's array from its start: free bytes, then
	// b. WireRoom hands it out once.
	room []byte
	// inline holds parts when they are few, saving an allocation.
	inline [4]part
}

// numKinds is the number of kinds of message fields in callWire.parts.
const numKinds = 6

// part is one message field's record (tag, length, message) in callWire.b.
type part struct {
	msg proto.Message
	b   []byte
}

// The numbers of ToolCall's message fields. (Their index in
// callWire.parts is encodeCall's first argument to add.)
const (
	fieldStatus                                                 = 4
	fieldContent, fieldLocations, fieldRawInput, fieldRawOutput = 5, 6, 7, 8
	fieldMeta, fieldExtra                                       = 14, 15
)

// errPlain makes Wire marshal a tool call the plain way.
var errPlain = errors.New("merge: tool call not encoded by parts")

// Wire returns the protobuf encoding of call, proto.Marshal's but for the
// order of map entries (which proto.Marshal does not fix either). For the
// current version of a tool call it reuses the encodings of the fields the
// version before it shared, and of those that parts (nil for none) holds:
// the update that made the version carries its new values, encoded in the
// update's own event. The bytes are shared: the caller must not modify
// them.
func (s *State) Wire(call *acpv2.ToolCall, parts *Parts) ([]byte, error) {
	e, done := s.current(call)
	switch {
	case e == nil:
		return proto.Marshal(call) // an earlier version, or a preview
	case done:
		return e.enc.b, nil
	}
	enc, err := encodeCall(e.enc, call, parts, 0, &s.scratch)
	if err != nil {
		e.enc = nil
		b, err := proto.Marshal(call)
		if err == nil {
			s.setSize(e, len(b))
		}
		return b, err
	}
	e.enc = enc
	s.setSize(e, len(enc.b))
	return enc.b, nil
}

// WireRoom is Wire with room free bytes before the encoding, in the same
// array, for the caller to write a header into: it returns those bytes
// and the encoding after them. It does so once, for the current version
// of a tool call, when it encodes it; otherwise it returns false, and the
// caller copies what Wire returns. The encoding part must not be
// modified: the State reads it for the next version.
func (s *State) WireRoom(call *acpv2.ToolCall, parts *Parts, room int) ([]byte, bool) {
	e, done := s.current(call)
	if e == nil || done {
		return nil, false // not current, or encoded already: its room may be in use
	}
	enc, err := encodeCall(e.enc, call, parts, room, &s.scratch)
	if err != nil || enc.room == nil {
		return nil, false
	}
	e.enc = enc
	s.setSize(e, len(enc.b))
	full := enc.room
	enc.room = nil
	if n := room + len(enc.b); n > cap(full) || len(enc.b) > 0 && &full[:n][room] != &enc.b[0] {
		return nil, false // the encoding outgrew its array
	}
	return full[:room+len(enc.b)], true
}

// current returns the entry whose current version is call, or nil, and
// whether its encoding is made already.
func (s *State) current(call *acpv2.ToolCall) (e *entry, encoded bool) {
	i, ok := s.index[call.GetToolCallId()]
	if !ok || s.calls[i].call != call {
		return nil, false
	}
	e = &s.calls[i]
	return e, e.enc != nil && e.enc.call == call
}

// record is a message field's record in the making: the bytes of the
// version before, or a message's encoding from parts (known), or one
// marshalled anew (at scratch[start:end]).
type record struct {
	num        protowire.Number
	msg        proto.Message
	old, known []byte
	start, end int
}

// encodeCall encodes c, reusing the records of prev (an encoding of the
// version before c, or nil) for the message fields c shares with it. It
// marshals the new fields into scratch first, so that the encoding is
// allocated once, at its size.
func encodeCall(prev *callWire, c *acpv2.ToolCall, parts *Parts, room int, scratch *[]byte) (*callWire, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, errPlain
	}
	strs := [...]string{c.ToolCallId, c.Title, c.Kind, c.Status}
	size := 0
	for n, s := range strs {
		if s == "" {
			continue
		}
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("merge: tool call field %d is not valid UTF-8", n+1)
		}
		size += protowire.SizeTag(protowire.Number(n+1)) + protowire.SizeBytes(len(s))
	}
	buf := (*scratch)[:0]
	var stack [8]record
	recs := stack[:0]
	counts := [numKinds]int{}
	var err error
	add := func(k int, num protowire.Number, m proto.Message, isNil bool) {
		if err != nil {
			return
		}
		if isNil {
			err = errPlain // proto.Marshal's business
			return
		}
		r := record{num: num, msg: m}
		if i := counts[k]; prev != nil && i < len(prev.parts[k]) && prev.parts[k][i].msg == m {
			r.old = prev.parts[k][i].b
			size += len(r.old)
		} else if r.known = parts.lookup(m); r.known != nil {
			size += protowire.SizeTag(num) + protowire.SizeBytes(len(r.known))
		} else {
			r.start = len(buf)
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, m); err != nil {
				return
			}
			r.end = len(buf)
			size += protowire.SizeTag(num) + protowire.SizeBytes(r.end-r.start)
		}
		counts[k]++
		recs = append(recs, r)
	}
	for _, item := range c.Content {
		add(0, fieldContent, item, item == nil)
	}
	for _, loc := range c.Locations {
		add(1, fieldLocations, loc, loc == nil)
	}
	if c.RawInput != nil {
		add(2, fieldRawInput, c.RawInput, false)
	}
	if c.RawOutput != nil {
		add(3, fieldRawOutput, c.RawOutput, false)
	}
	if c.Meta != nil {
		add(4, fieldMeta, c.Meta, false)
	}
	if c.Extra != nil {
		add(5, fieldExtra, c.Extra, false)
	}
	*scratch = buf
	if err != nil {
		return nil, err
	}
	full := make([]byte, room, room+size)
	w := &callWire{call: c, b: full[room:]}
	if room > 0 {
		w.room = full
	}
	all := w.inline[:0]
	if len(recs) > len(w.inline) {
		all = make([]part, 0, len(recs))
	}
	for n, s := range strs {
		if s != "" {
			w.b = protowire.AppendTag(w.b, protowire.Number(n+1), protowire.BytesType)
			w.b = protowire.AppendString(w.b, s)
		}
	}
	for _, r := range recs {
		start := len(w.b)
		switch {
		case r.old != nil:
			w.b = append(w.b, r.old...)
		case r.known != nil:
			w.b = protowire.AppendTag(w.b, r.num, protowire.BytesType)
			w.b = protowire.AppendBytes(w.b, r.known)
		default:
			w.b = protowire.AppendTag(w.b, r.num, protowire.BytesType)
			w.b = protowire.AppendBytes(w.b, buf[r.start:r.end])
		}
		all = append(all, part{msg: r.msg, b: w.b[start:len(w.b):len(w.b)]})
	}
	// The records come by kind: each kind's parts are a run of all.
	for k, n := range counts {
		if n > 0 {
			w.parts[k], all = all[:n:n], all[n:]
		}
	}
	return w, nil
}

// Parts are the encodings of the messages an update carries (content
// items, locations, rawInput and rawOutput, _meta), read from the update's
// own encoding, for Wire to reuse in the merged call: they are the same
// messages.
type Parts struct {
	parts []part
	// inline holds parts when they are few, saving allocations.
	inline [4]part
}

func (p *Parts) add(m proto.Message, wire []byte) {
	if m != nil && wire != nil {
		if p.parts == nil {
			p.parts = p.inline[:0]
		}
		p.parts = append(p.parts, part{msg: m, b: wire})
	}
}

// lookup returns the encoding of m, or nil.
func (p *Parts) lookup(m proto.Message) []byte {
	if p == nil {
		return nil
	}
	for _, pt := range p.parts {
		if pt.msg == m {
			return pt.b
		}
	}
	return nil
}

// UpdateParts returns the parts of u found in wire, u's encoding.
func UpdateParts(u *acpv2.ToolCallUpdate, wire []byte) *Parts {
	p := &Parts{}
	fields(wire, func(num protowire.Number, b []byte) {
		switch num {
		case fieldContent:
			addList(p, b, u.GetContent().GetValue().GetItems())
		case fieldLocations:
			addList(p, b, u.GetLocations().GetValue().GetItems())
		case fieldRawInput:
			p.add(u.GetRawInput().GetValue(), valueField(b))
		case fieldRawOutput:
			p.add(u.GetRawOutput().GetValue(), valueField(b))
		case fieldMeta:
			p.add(u.GetMeta().GetValue(), valueField(b))
		}
	})
	return p
}

// ChunkParts returns the parts of c found in wire, c's encoding.
func ChunkParts(c *acpv2.ToolCallContentChunk, wire []byte) *Parts {
	p := &Parts{}
	fields(wire, func(num protowire.Number, b []byte) {
		switch num {
		case 2: // content
			p.add(c.GetContent(), b)
		case fieldMeta:
			p.add(c.GetMeta(), b)
		}
	})
	return p
}

// addList adds the items of a list patch's value (field 2, a list whose
// items are field 1), encoded in b, to the items they encode, in order.
func addList[M proto.Message](p *Parts, b []byte, items []M) {
	list := valueField(b)
	i := 0
	fields(list, func(num protowire.Number, item []byte) {
		if num == 1 && i < len(items) {
			p.add(items[i], item)
			i++
		}
	})
}

// valueField returns the encoding of a patch's value (field 2), or nil.
func valueField(b []byte) []byte {
	v, _ := protowalk.Bytes(b, 2)
	return v
}

// fields calls f with the number and contents of each length-delimited
// field of an encoding, until the encoding ends or is malformed.
func fields(b []byte, f func(num protowire.Number, v []byte)) {
	_ = protowalk.Fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ == protowire.BytesType {
			f(num, v)
		}
		return nil
	})
}
