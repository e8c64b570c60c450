package encoded

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

// Calls encodes a session's merged tool calls, for their events: each
// version of a call from the encodings of the fields it shares with the
// version before it (a merged tool call shares every unchanged field value
// with the version before, see merge.State) and of those the update that
// made it carries ([Parts]), so that only what changed is marshalled: each
// update made an event that carried the call whole, rawInput and all. It
// keeps each call's last encoding until [Calls.Forget] or [Calls.Reset].
// The zero Calls is ready for use; it is not safe for concurrent use.
type Calls struct {
	last map[string]*callWire
	// scratch is encodeCall's buffer for the fields it marshals anew.
	scratch []byte
}

// Body returns the body of call's merged event (see callBody): call's
// encoding, proto.Marshal's but for the order of map entries (which
// proto.Marshal does not fix either), with room for the event's head
// before it when made here. A second Body of the same version gives the
// same encoding without the room, which the first may use; a call not
// encoded by parts (unknown fields) is marshalled whole. It is the zero
// Body when call does not encode. The encoding is shared: it must not be
// modified, as the next version's reuses it. The event [Numbered] makes
// of the Body makes its JSON from the JSON of the parts it shares with
// the versions before, as their events made it (see callJSON).
func (c *Calls) Body(call *acpv2.ToolCall, parts *Parts) Body {
	id := call.GetToolCallId()
	prev := c.last[id]
	if prev != nil && prev.call == call {
		return callBody(prev.b, false, prev.json) // encoded already: its room may be in use
	}
	enc, err := encodeCall(prev, call, parts, headroom, &c.scratch)
	if err != nil {
		delete(c.last, id)
		b, err := proto.Marshal(call)
		if err != nil {
			return Body{}
		}
		return callBody(b, false, nil)
	}
	if prev != nil {
		enc.json = prev.json
	} else {
		enc.json = &callJSON{}
	}
	if c.last == nil {
		c.last = map[string]*callWire{}
	}
	c.last[id] = enc
	full := enc.room
	enc.room = nil
	if n := headroom + len(enc.b); n > cap(full) || len(enc.b) > 0 && &full[:n][headroom] != &enc.b[0] {
		return callBody(enc.b, false, enc.json) // the encoding outgrew its array
	}
	return callBody(full[:headroom+len(enc.b)], true, enc.json)
}

// Forget lets go of the last encoding of tool call id: the call was
// compacted or trimmed, and its next version shares nothing with it.
func (c *Calls) Forget(id string) { delete(c.last, id) }

// Reset lets go of every call's last encoding, and of the scratch buffer:
// the session may stay idle for long.
func (c *Calls) Reset() { *c = Calls{} }

// callWire is the protobuf encoding of a tool call, with the place in it
// of each message field, so that the next version's encoding marshals only
// the fields that changed.
type callWire struct {
	call  *acpv2.ToolCall
	b     []byte
	parts [numKinds][]part // by field: content, locations, then the singular ones
	// room, when not nil, is b's array from its start: free bytes, then
	// b. Body hands it out once.
	room []byte
	// inline holds parts when they are few, saving an allocation.
	inline [4]part
	// json is the JSON of the call's parts, shared by its versions'
	// events.
	json *callJSON
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
	fieldContent, fieldLocations, fieldRawInput, fieldRawOutput = 5, 6, 7, 8
	fieldMeta, fieldExtra                                       = 14, 15
)

// errPlain makes Body marshal a tool call the plain way.
var errPlain = errors.New("encoded: tool call not encoded by parts")

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
			return nil, fmt.Errorf("encoded: tool call field %d is not valid UTF-8", n+1)
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
// own encoding, for Calls.Body to reuse in the merged call: they are the
// same messages.
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
