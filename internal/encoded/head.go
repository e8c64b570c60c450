package encoded

import (
	"google.golang.org/protobuf/encoding/protowire"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// withBody returns ev's encoding made of its seq and time and body, the
// encoding of the message in its event field, whose number is field (as
// a merged tool call's encoding that Calls.Body made from the parts of the
// version before it), or false for an event whose encoding cannot
// be made that way (unknown fields). The encoding is a copy: body stays
// the caller's.
func withBody(ev *acpv2.SessionEvent, field protowire.Number, body []byte) ([]byte, bool) {
	h, ok := head(make([]byte, 0, headroom+len(body)), ev, field, len(body))
	if !ok {
		return nil, false
	}
	return append(h, body...), true
}

// headroom is the room withBodyIn needs before a body: more than an
// event's seq and time and its event field's tag and length take.
const headroom = 48

// withBodyIn is withBody for a body at buf[headroom:]: the head is
// written into the room before it, and the encoding is the rest of buf
// from there, without a copy. buf must not be used afterwards.
func withBodyIn(ev *acpv2.SessionEvent, field protowire.Number, buf []byte) ([]byte, bool) {
	var room [headroom]byte
	h, ok := head(room[:0], ev, field, len(buf)-headroom)
	if !ok {
		return nil, false
	}
	start := headroom - len(h)
	copy(buf[start:], h)
	return buf[start:], true
}

// head appends to b what comes before the body in ev's encoding, in field
// order as proto.Marshal writes them: seq (1), time (2: seconds 1, nanos
// 2), then the tag of the event field, number field, and the body's
// length. It fails for an event whose encoding is not made that way.
func head(b []byte, ev *acpv2.SessionEvent, field protowire.Number, bodyLen int) ([]byte, bool) {
	if len(ev.ProtoReflect().GetUnknown()) != 0 || len(ev.GetTime().ProtoReflect().GetUnknown()) != 0 {
		return nil, false
	}
	if ev.Seq != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, ev.Seq)
	}
	if t := ev.Time; t != nil {
		var tb [24]byte
		tm := tb[:0]
		if t.Seconds != 0 {
			tm = protowire.AppendTag(tm, 1, protowire.VarintType)
			tm = protowire.AppendVarint(tm, uint64(t.Seconds))
		}
		if t.Nanos != 0 {
			tm = protowire.AppendTag(tm, 2, protowire.VarintType)
			tm = protowire.AppendVarint(tm, uint64(int64(t.Nanos)))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, tm)
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(bodyLen))
	return b, len(b) <= headroom
}
