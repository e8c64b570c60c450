package merge

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
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
	parts [][]part // by field: content, locations, then the singular ones
}

// part is one message field's record (tag, length, message) in callWire.b.
type part struct {
	msg proto.Message
	b   []byte
}

// The fields of ToolCall, by number, and the index of each message field
// in callWire.parts.
const (
	fieldContent, fieldLocations, fieldRawInput, fieldRawOutput = 5, 6, 7, 8
	fieldMeta, fieldExtra                                       = 14, 15
)

// errPlain makes Wire marshal a tool call the plain way.
var errPlain = errors.New("merge: tool call not encoded by parts")

// Wire returns the protobuf encoding of call, proto.Marshal's but for the
// order of map entries (which proto.Marshal does not fix either). For the
// current version of a tool call it reuses the encodings of the fields the
// version before it shared. The bytes are shared: the caller must not
// modify them.
func (s *State) Wire(call *acpv2.ToolCall) ([]byte, error) {
	i, ok := s.index[call.GetToolCallId()]
	if !ok || s.calls[i].call != call {
		return proto.Marshal(call) // an earlier version, or a preview
	}
	e := &s.calls[i]
	if e.enc != nil && e.enc.call == call {
		return e.enc.b, nil
	}
	enc, err := encodeCall(e.enc, call)
	if err != nil {
		e.enc = nil
		return proto.Marshal(call)
	}
	e.enc = enc
	return enc.b, nil
}

// encodeCall encodes c, reusing the records of prev (an encoding of the
// version before c, or nil) for the message fields c shares with it.
func encodeCall(prev *callWire, c *acpv2.ToolCall) (*callWire, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, errPlain
	}
	size := 256
	if prev != nil {
		size += len(prev.b)
	}
	w := &callWire{call: c, b: make([]byte, 0, size), parts: make([][]part, 6)}
	var err error
	for n, s := range []string{1: c.ToolCallId, 2: c.Title, 3: c.Kind, 4: c.Status} {
		if s == "" {
			continue
		}
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("merge: tool call field %d is not valid UTF-8", n)
		}
		w.b = protowire.AppendTag(w.b, protowire.Number(n), protowire.BytesType)
		w.b = protowire.AppendString(w.b, s)
	}
	// Offsets of the records, made into slices of w.b once it is whole.
	type at struct{ start, end int }
	offsets := make([][]at, len(w.parts))
	add := func(k int, num protowire.Number, m proto.Message, isNil bool) {
		if err != nil {
			return
		}
		if isNil {
			err = errPlain // proto.Marshal's business
			return
		}
		start := len(w.b)
		var old *part
		if prev != nil && len(offsets[k]) < len(prev.parts[k]) {
			old = &prev.parts[k][len(offsets[k])]
		}
		if old != nil && old.msg == m {
			w.b = append(w.b, old.b...)
		} else {
			var mb []byte
			if mb, err = proto.Marshal(m); err != nil {
				return
			}
			w.b = protowire.AppendTag(w.b, num, protowire.BytesType)
			w.b = protowire.AppendBytes(w.b, mb)
		}
		w.parts[k] = append(w.parts[k], part{msg: m})
		offsets[k] = append(offsets[k], at{start, len(w.b)})
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
	if err != nil {
		return nil, err
	}
	for k := range w.parts {
		for j, o := range offsets[k] {
			w.parts[k][j].b = w.b[o.start:o.end:o.end]
		}
	}
	return w, nil
}
