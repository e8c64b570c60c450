package eventjson

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Parts is the JSON of the message values of one message (a merged tool
// call's content items, locations, rawInput, ...), as [MarshalReusing]
// wrote them, each within the JSON it returned: for the next version of
// the message, which shares most of them, to copy rather than write again.
// It holds the messages, so that none is taken for another at its
// address. It is immutable, and safe for concurrent use.
type Parts struct {
	of    protoreflect.MessageDescriptor
	parts []part
}

// Len returns the number of parts, for tests.
func (p *Parts) Len() int {
	if p == nil {
		return 0
	}
	return len(p.parts)
}

// part is one message value's JSON: of the field at step (its index in
// the plan's steps) and, in a list, its index; json is the earlier
// version's for a part reused, else set once written, at b[start:end]
// until then.
type part struct {
	step, index int
	msg         proto.Message
	json        []byte
	start, end  int
}

// reuse is the state of a MarshalReusing: the message whose parts are
// reused (of; nil for a plain Marshal), the parts of the version before
// (prev, read in order from cur), and the parts written (next).
type reuse struct {
	of    protoreflect.MessageDescriptor
	found bool
	prev  []part
	cur   int
	next  []part
	// cuts are where the parts reused go between the bytes written.
	cuts []cut
}

// cut is a part reused, old, which goes at b[at] of the bytes written.
type cut struct {
	at  int
	old []byte
}

// maxKeptParts bounds the parts an encoder keeps room for between
// messages.
const maxKeptParts = 1024

func (r *reuse) reset() {
	clear(r.next) // hold no message, no JSON
	clear(r.cuts)
	next, cuts := r.next[:0], r.cuts[:0]
	if cap(next) > maxKeptParts {
		next, cuts = nil, nil
	}
	*r = reuse{next: next, cuts: cuts}
}

// made returns the JSON of the message written, in segments, when parts
// were reused (else nil: it is out), and the parts written, within out,
// the bytes written: nil when no message was written by parts.
func (r *reuse) made(out []byte) ([][]byte, *Parts) {
	if !r.found {
		return nil, nil
	}
	p := &Parts{of: r.of, parts: make([]part, len(r.next))}
	for i, pt := range r.next {
		if pt.json == nil {
			pt.json = out[pt.start:pt.end:pt.end]
		}
		p.parts[i] = part{step: pt.step, index: pt.index, msg: pt.msg, json: pt.json}
	}
	if len(r.cuts) == 0 {
		return nil, p
	}
	segs := make([][]byte, 0, 2*len(r.cuts)+1)
	from := 0
	for _, c := range r.cuts {
		if c.at > from {
			segs = append(segs, out[from:c.at:c.at])
		}
		segs = append(segs, c.old)
		from = c.at
	}
	if from < len(out) {
		segs = append(segs, out[from:])
	}
	return segs, p
}

// lookup returns the JSON of the previous version's part at step and
// index, when it is msg's: parts are looked up in the order they were
// written, as they are written.
func (r *reuse) lookup(step, index int, msg proto.Message) []byte {
	for r.cur < len(r.prev) {
		p := &r.prev[r.cur]
		if p.step > step || p.step == step && p.index > index {
			return nil
		}
		r.cur++
		if p.step == step && p.index == index {
			if p.msg == msg {
				return p.json
			}
			return nil
		}
	}
	return nil
}

// parts writes the value of a message field f, at step of the message
// written by parts, each message (each element of a list) as a part.
func (e *encoder) parts(v protoreflect.Value, f *field, step int) bool {
	if !f.list {
		return e.part(v.Message(), f, step, 0)
	}
	l := v.List()
	e.b = append(e.b, '[')
	for i := range l.Len() {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if !e.part(l.Get(i).Message(), f, step, i) {
			return false
		}
	}
	e.b = append(e.b, ']')
	return true
}

// part writes m, or where the version before has the same message there
// marks its JSON's place, and records it.
func (e *encoder) part(m protoreflect.Message, f *field, step, index int) bool {
	msg := m.Interface()
	start := len(e.b)
	old := e.reuse.lookup(step, index, msg)
	if old != nil {
		e.reuse.cuts = append(e.reuse.cuts, cut{at: start, old: old})
	} else if !e.message(m, f.msg) {
		return false
	}
	e.reuse.next = append(e.reuse.next, part{step: step, index: index, msg: msg, json: old, start: start, end: len(e.b)})
	return true
}
