package encoded

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/pbstruct"
)

// Body is the encoding of the message in an event's event field, made
// before the event is numbered (an update's, whose parts its merged call
// reuses, or a merged call's): [Numbered] makes the event's encoding of
// it. With room, b begins with headroom bytes free for the rest of the
// event's encoding, its head, which is then written there, without a
// copy. The zero Body is none: the event is marshalled whole.
type Body struct {
	b    []byte
	room bool
	// field is the number of the event's field that b encodes.
	field protowire.Number
	// call is a merged tool call's JSON parts, for the event's JSON.
	call *callJSON
}

// Bytes returns the encoding of the message, without the room before it.
func (bd Body) Bytes() []byte {
	if bd.room && bd.b != nil {
		return bd.b[headroom:]
	}
	return bd.b
}

// callBody is the Body of a merged tool call's event: b is the call's
// encoding, after headroom free bytes when room is set.
func callBody(b []byte, room bool, call *callJSON) Body {
	return Body{b: b, room: room && b != nil, field: protowire.Number(ToolCall), call: call}
}

// Numbered returns events, numbered and timed already, as Events (made
// in one allocation), each with its encoding made of its body (bodies[i],
// when bodies holds one) and the head written before it: in the body's
// room, so that the body is the Event's from then on and must not be used
// afterwards, else in a copy. An event whose encoding cannot be made so
// (no body, unknown fields) is marshalled whole, and marshalled counts
// them. err is the first event's that does not encode (a string that is
// not UTF-8): that Event is made all the same, without its bytes, for the
// caller to let go of in order.
func Numbered(events []*acpv2.SessionEvent, bodies []Body) (out []*Event, marshalled int, err error) {
	all := make([]Event, len(events))
	out = make([]*Event, len(events))
	for i, ev := range events {
		var bd Body
		if i < len(bodies) {
			bd = bodies[i]
		}
		var wire []byte
		ok := false
		switch {
		case bd.room:
			wire, ok = withBodyIn(ev, bd.field, bd.b)
		case bd.b != nil:
			wire, ok = withBody(ev, bd.field, bd.b)
		}
		kind := Kind(bd.field)
		if !ok {
			marshalled, kind = marshalled+1, 0
			var merr error
			if wire, merr = proto.Marshal(ev); merr != nil {
				wire = nil
				if err == nil {
					err = fmt.Errorf("encoding event %d: %w", ev.GetSeq(), merr)
				}
			}
		}
		all[i].set(ev, wire, kind)
		all[i].call = bd.call
		out[i] = &all[i]
	}
	return out, marshalled, err
}

// BodyOf returns the encoding of the message in ev's event field, with
// room before it, or none when it has no such message or it does not
// marshal (Numbered then says why).
func BodyOf(ev *acpv2.SessionEvent) Body {
	msg, num := eventMessage(ev)
	if num == 0 {
		return Body{}
	}
	scratch := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(scratch)
	b, err := appendUpdate((*scratch)[:0], msg)
	if err != nil {
		return Body{}
	}
	if cap(b) <= maxBodyBuffer {
		*scratch = b
	}
	// One allocation at the size needed: growing the body in place took
	// several, and left the event's array up to twice its size.
	out := make([]byte, headroom+len(b))
	copy(out[headroom:], b)
	return Body{b: out, room: true, field: num}
}

// The numbers of the commonest event fields, which eventMessage names
// without reflection.
var (
	toolCallUpdateField       = eventDesc.Fields().ByName("tool_call_update").Number()
	toolCallContentChunkField = eventDesc.Fields().ByName("tool_call_content_chunk").Number()
	agentMessageChunkField    = eventDesc.Fields().ByName("agent_message_chunk").Number()
	agentThoughtChunkField    = eventDesc.Fields().ByName("agent_thought_chunk").Number()
)

// eventMessage returns the message in ev's event field and the field's
// number, or 0 when the field is unset or not a message. The commonest
// kinds are told by a type switch: WhichOneof and Get were a fifth of
// BodyOf's time (0.15 of 0.69 s in a CPU profile of 200,000 updates on
// connect+proto, docs/BENCHMARKS.md).
func eventMessage(ev *acpv2.SessionEvent) (proto.Message, protowire.Number) {
	switch e := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_ToolCallUpdate:
		return e.ToolCallUpdate, toolCallUpdateField
	case *acpv2.SessionEvent_ToolCallContentChunk:
		return e.ToolCallContentChunk, toolCallContentChunkField
	case *acpv2.SessionEvent_AgentMessageChunk:
		return e.AgentMessageChunk, agentMessageChunkField
	case *acpv2.SessionEvent_AgentThoughtChunk:
		return e.AgentThoughtChunk, agentThoughtChunkField
	}
	m := ev.ProtoReflect()
	fd := m.WhichOneof(eventOneof)
	if fd == nil || fd.Message() == nil {
		return nil, 0
	}
	return m.Get(fd).Message().Interface(), fd.Number()
}

// bodyBuffers are BodyOf's scratch buffers, up to maxBodyBuffer bytes.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxBodyBuffer = 64 << 10

// appendUpdate appends the encoding of an update message: the updates
// agents send most are encoded field by field, their google.protobuf
// Struct and Value fields (_meta, rawInput, rawOutput, extra) by pbstruct,
// which proto.Marshal takes several times as long for (pbstruct's
// BenchmarkAppendStruct); the others, and any that pbstruct does not
// encode, by proto.Marshal. Either decodes to m. A nil message encodes
// as the empty one, as proto.Marshal has it.
func appendUpdate(b []byte, m proto.Message) ([]byte, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return b, nil // nil, or a typed nil
	}
	var out []byte
	var err error
	switch u := m.(type) {
	case *acpv2.ToolCallUpdate:
		out, err = appendToolCallUpdate(b, u)
	case *acpv2.ToolCallContentChunk:
		out, err = appendContentChunk(b, u)
	case *acpv2.ContentChunk:
		out, err = appendChunk(b, u)
	default:
		err = pbstruct.ErrUnsupported
	}
	if errors.Is(err, pbstruct.ErrUnsupported) {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	return out, err
}

var errUTF8 = errors.New("encoded: string field contains invalid UTF-8")

func appendToolCallUpdate(b []byte, u *acpv2.ToolCallUpdate) ([]byte, error) {
	if len(u.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendString(b, 1, u.ToolCallId); err != nil {
		return nil, err
	}
	for i, m := range []proto.Message{u.Title, u.Kind, u.Status, u.Content, u.Locations} {
		if b, err = appendMessage(b, protowire.Number(2+i), m); err != nil {
			return nil, err
		}
	}
	for i, p := range []*acpv2.ValuePatch{u.RawInput, u.RawOutput} {
		if p == nil {
			continue
		}
		if len(p.ProtoReflect().GetUnknown()) != 0 {
			return nil, pbstruct.ErrUnsupported
		}
		switch op := p.Op.(type) {
		case *acpv2.ValuePatch_Value:
			if b, err = appendValueField(b, protowire.Number(7+i), 2, op.Value); err != nil {
				return nil, err
			}
		case *acpv2.ValuePatch_Clear:
			b = appendClear(b, protowire.Number(7+i), op.Clear)
		default:
			b = appendEmpty(b, protowire.Number(7+i))
		}
	}
	if p := u.Meta; p != nil {
		if len(p.ProtoReflect().GetUnknown()) != 0 {
			return nil, pbstruct.ErrUnsupported
		}
		switch op := p.Op.(type) {
		case *acpv2.StructPatch_Value:
			if b, err = appendStructField(b, 14, 2, op.Value); err != nil {
				return nil, err
			}
		case *acpv2.StructPatch_Clear:
			b = appendClear(b, 14, op.Clear)
		default:
			b = appendEmpty(b, 14)
		}
	}
	return appendStruct(b, 15, u.Extra)
}

func appendContentChunk(b []byte, c *acpv2.ToolCallContentChunk) ([]byte, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendString(b, 1, c.ToolCallId); err != nil {
		return nil, err
	}
	if b, err = appendMessage(b, 2, c.Content); err != nil {
		return nil, err
	}
	if b, err = appendStruct(b, 14, c.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, c.Extra)
}

func appendChunk(b []byte, c *acpv2.ContentChunk) ([]byte, error) {
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendMessage(b, 1, c.Content); err != nil {
		return nil, err
	}
	if c.MessageId != nil {
		if !utf8.ValidString(*c.MessageId) {
			return nil, errUTF8
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, *c.MessageId)
	}
	if b, err = appendStruct(b, 14, c.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, c.Extra)
}

// appendString appends a proto3 string field, omitted when empty.
func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return nil, errUTF8
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), nil
}

// appendMessage appends a message field, omitted when nil: the patches,
// content items and locations of the updates field by field (see
// appendFields), any other message, and any that appendFields does not
// encode, by proto.Marshal.
func appendMessage(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return b, nil
	}
	out, err := pbstruct.AppendNested(b, num, m, appendFields)
	if !errors.Is(err, pbstruct.ErrUnsupported) {
		return out, err
	}
	size := proto.Size(m)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
}

// appendFields appends the fields of the messages appendMessage encodes
// itself: what proto.Marshal would, or an error where it would fail, or
// pbstruct.ErrUnsupported for a message it leaves to proto.Marshal
// (unknown fields, annotations, content blocks other than text). Like
// proto.Marshal, the helpers below encode a nil message as an empty one.
func appendFields(b []byte, m proto.Message) ([]byte, error) {
	if len(m.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	switch m := m.(type) {
	case *acpv2.StringPatch:
		switch op := m.Op.(type) {
		case *acpv2.StringPatch_Clear:
			return appendNull(b, op.Clear), nil
		case *acpv2.StringPatch_Value:
			if !utf8.ValidString(op.Value) {
				return nil, errUTF8
			}
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			return protowire.AppendString(b, op.Value), nil
		}
		return b, nil
	case *acpv2.ToolCallContentPatch:
		switch op := m.Op.(type) {
		case *acpv2.ToolCallContentPatch_Clear:
			return appendNull(b, op.Clear), nil
		case *acpv2.ToolCallContentPatch_Value:
			return pbstruct.AppendNested(b, 2, op.Value, func(b []byte, l *acpv2.ToolCallContentList) ([]byte, error) {
				return appendList(b, l, l.GetItems(), appendContentItem)
			})
		}
		return b, nil
	case *acpv2.ToolCallLocationPatch:
		switch op := m.Op.(type) {
		case *acpv2.ToolCallLocationPatch_Clear:
			return appendNull(b, op.Clear), nil
		case *acpv2.ToolCallLocationPatch_Value:
			return pbstruct.AppendNested(b, 2, op.Value, func(b []byte, l *acpv2.ToolCallLocationList) ([]byte, error) {
				return appendList(b, l, l.GetItems(), appendLocation)
			})
		}
		return b, nil
	case *acpv2.ToolCallContent:
		return appendContentItem(b, m)
	case *acpv2.ContentBlock:
		return appendContentBlock(b, m)
	}
	return nil, pbstruct.ErrUnsupported
}

// appendNull appends a patch's field 1, a google.protobuf.NullValue.
func appendNull(b []byte, null structpb.NullValue) []byte {
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(null)))
}

// appendList appends the items of list l, each as its field 1.
func appendList[M any](b []byte, l proto.Message, items []M, appendItem func([]byte, M) ([]byte, error)) ([]byte, error) {
	if !l.ProtoReflect().IsValid() {
		return b, nil
	}
	if len(l.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	for _, item := range items {
		if b, err = pbstruct.AppendNested(b, 1, item, appendItem); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func appendContentItem(b []byte, c *acpv2.ToolCallContent) ([]byte, error) {
	if c == nil {
		return b, nil
	}
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	// proto.Marshal writes a oneof after the other fields.
	b, err := appendStruct(b, 14, c.Meta)
	if err != nil {
		return nil, err
	}
	if b, err = appendStruct(b, 15, c.Extra); err != nil {
		return nil, err
	}
	switch item := c.Item.(type) {
	case nil:
	case *acpv2.ToolCallContent_Content:
		b, err = pbstruct.AppendNested(b, 1, item.Content, appendContentBlock)
	case *acpv2.ToolCallContent_Diff:
		b, err = pbstruct.AppendNested(b, 2, item.Diff, appendDiff)
	case *acpv2.ToolCallContent_Terminal:
		b, err = pbstruct.AppendNested(b, 3, item.Terminal, appendTerminal)
	default:
		return nil, pbstruct.ErrUnsupported
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// appendContentBlock appends a text content block without annotations.
func appendContentBlock(b []byte, c *acpv2.ContentBlock) ([]byte, error) {
	if c == nil {
		return b, nil
	}
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	switch block := c.Block.(type) {
	case nil:
		return b, nil
	case *acpv2.ContentBlock_Text:
		return pbstruct.AppendNested(b, 1, block.Text, appendText)
	}
	return nil, pbstruct.ErrUnsupported
}

func appendText(b []byte, t *acpv2.TextContent) ([]byte, error) {
	if t == nil {
		return b, nil
	}
	if t.Annotations != nil || len(t.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	var err error
	if b, err = appendString(b, 1, t.Text); err != nil {
		return nil, err
	}
	if b, err = appendStruct(b, 14, t.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, t.Extra)
}

func appendDiff(b []byte, d *acpv2.Diff) ([]byte, error) {
	if d == nil {
		return b, nil
	}
	// A v2 diff (changes, patch) is left to proto.Marshal: only v1's
	// whole texts, which can be large, are worth encoding by hand.
	if len(d.ProtoReflect().GetUnknown()) != 0 || d.Changes != nil || d.Patch != nil {
		return nil, pbstruct.ErrUnsupported
	}
	for i, s := range [...]*string{d.Path, d.OldText, d.NewText} {
		if s == nil {
			continue
		}
		if !utf8.ValidString(*s) {
			return nil, errUTF8
		}
		b = protowire.AppendTag(b, protowire.Number(1+i), protowire.BytesType)
		b = protowire.AppendString(b, *s)
	}
	return b, nil
}

func appendTerminal(b []byte, t *acpv2.Terminal) ([]byte, error) {
	if t == nil {
		return b, nil
	}
	if len(t.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	return appendString(b, 1, t.TerminalId)
}

func appendLocation(b []byte, l *acpv2.ToolCallLocation) ([]byte, error) {
	if l == nil {
		return b, nil
	}
	if len(l.ProtoReflect().GetUnknown()) != 0 {
		return nil, pbstruct.ErrUnsupported
	}
	b, err := appendString(b, 1, l.Path)
	if err != nil {
		return nil, err
	}
	if l.Line != nil {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(*l.Line))
	}
	if b, err = appendStruct(b, 14, l.Meta); err != nil {
		return nil, err
	}
	return appendStruct(b, 15, l.Extra)
}

// appendEmpty appends an empty message field: a patch without an op.
func appendEmpty(b []byte, num protowire.Number) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, 0)
}

// appendClear appends a tri-state patch that clears: its field 1, a
// google.protobuf.NullValue.
func appendClear(b []byte, num protowire.Number, null structpb.NullValue) []byte {
	v := uint64(int64(null))
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeVarint(v)))
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendStruct appends a Struct field, omitted when nil.
func appendStruct(b []byte, num protowire.Number, s *structpb.Struct) ([]byte, error) {
	if s == nil {
		return b, nil
	}
	return pbstruct.AppendNested(b, num, s, pbstruct.AppendStruct)
}

// appendStructField appends a message field num holding only Struct s as
// its field inner: a StructPatch's value. Like proto.Marshal, it encodes
// a nil Struct as an empty one.
func appendStructField(b []byte, num, inner protowire.Number, s *structpb.Struct) ([]byte, error) {
	return pbstruct.AppendNested(b, num, s, func(b []byte, s *structpb.Struct) ([]byte, error) {
		if s == nil {
			return appendEmpty(b, inner), nil
		}
		return pbstruct.AppendNested(b, inner, s, pbstruct.AppendStruct)
	})
}

// appendValueField appends a message field num holding only Value v as
// its field inner: a ValuePatch's value. Like proto.Marshal, it encodes
// a nil Value as an empty one.
func appendValueField(b []byte, num, inner protowire.Number, v *structpb.Value) ([]byte, error) {
	return pbstruct.AppendNested(b, num, v, func(b []byte, v *structpb.Value) ([]byte, error) {
		if v == nil {
			return appendEmpty(b, inner), nil
		}
		return pbstruct.AppendNested(b, inner, v, pbstruct.AppendValue)
	})
}
