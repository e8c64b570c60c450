package acpjson

import (
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The direct path: the fast path's updates read straight from a
// notification's bytes, without the map of the update object, and with
// rawInput, rawOutput and _meta parsed straight into google.protobuf
// values rather than into maps that toValue then copies. The members
// the fast path reads from parsed values (content, locations, ids) are
// parsed as before and handed to the same functions. It takes an update
// only when its first member is sessionUpdate and no member comes twice;
// anything else, and anything the fast path declines, is parsed again
// from the update's start as before. FuzzDirectMatchesParsed checks the
// two give the same notification.

// directUpdate decodes the update object at p.i, or returns ok false with
// p where it was.
func (p *parser) directUpdate(v Version) (*acpv2.SessionUpdate, bool) {
	start, depth, elems := p.i, p.depth, len(p.elems)
	u, ok := p.directMembers(v)
	if !ok || u == nil {
		p.i, p.depth = start, depth
		clear(p.elems[elems:])
		p.elems = p.elems[:elems]
		return nil, false
	}
	return u, true
}

func (p *parser) directMembers(v Version) (*acpv2.SessionUpdate, bool) {
	var (
		u     *acpv2.SessionUpdate
		seen  [12]string
		nseen int
		tc    *acpv2.ToolCallUpdate
		cc    *acpv2.ToolCallContentChunk
		mc    *acpv2.ContentChunk
	)
	ok := p.members(func(key string) bool {
		if nseen == 0 {
			if key != "sessionUpdate" {
				return false
			}
			if p.peek() != '"' {
				return false
			}
			tag, ok := p.text()
			switch tag {
			case "tool_call_update", "tool_call":
				u, tc = newToolCallUpdate()
				if tag == "tool_call" {
					v = V1
				}
			case "tool_call_content_chunk":
				u, cc = newContentChunkUpdate()
			case "agent_message_chunk", "agent_thought_chunk", "user_message_chunk":
				u, mc = newChunkUpdate(tag)
			default:
				return false
			}
			seen[0], nseen = key, 1
			return ok
		}
		for _, k := range seen[:nseen] {
			if k == key {
				return false // the last would win: the parsed path knows
			}
		}
		if nseen == len(seen) {
			return false
		}
		seen[nseen] = key
		nseen++
		switch c := p.peek(); {
		case c == 'n':
			// null: a clear, or unchanged, or absent (below)
		case tc != nil && (key == "rawInput" || key == "rawOutput"):
			// Values bound for google.protobuf types, parsed straight into them.
			val, ok := p.protoValue()
			if key == "rawInput" {
				tc.RawInput = valuePatch(val)
			} else {
				tc.RawOutput = valuePatch(val)
			}
			return ok
		case key == "_meta" && c == '{':
			var m *structpb.Struct
			switch {
			case tc != nil:
				tc.Meta, m = newStructPatch()
			case cc != nil:
				m = &structpb.Struct{}
				cc.Meta = m
			default:
				m = &structpb.Struct{}
				mc.Meta = m
			}
			return p.protoFields(m)
		case c == '"':
			// Strings, parsed without boxing them into an interface.
			s, ok := p.text()
			return ok && directString(tc, cc, mc, key, s)
		}
		val, ok := p.value()
		if !ok {
			return false
		}
		switch {
		case tc != nil:
			return toolCallMember(tc, key, val, v)
		case cc != nil:
			return contentChunkMember(cc, key, val)
		default:
			return chunkMember(mc, key, val)
		}
	})
	switch {
	case !ok:
		return nil, false
	case tc != nil && tc.ToolCallId != "", cc != nil && requiredChunk(cc), mc != nil:
		return u, true
	}
	return nil, false
}

// directString decodes the member key of the update being decoded (one of
// tc, cc and mc) whose value is the string s, as toolCallMember,
// contentChunkMember or chunkMember would.
func directString(tc *acpv2.ToolCallUpdate, cc *acpv2.ToolCallContentChunk, mc *acpv2.ContentChunk, key, s string) bool {
	switch {
	case tc != nil:
		switch key {
		case "toolCallId":
			tc.ToolCallId = s
		case "title":
			tc.Title = newStringPatch(s)
		case "kind":
			tc.Kind = newStringPatch(s)
		case "status":
			tc.Status = newStringPatch(s)
		default:
			return false // no other member of a tool call is a string
		}
	case cc != nil:
		if key != "toolCallId" {
			return false
		}
		cc.ToolCallId = s
	default:
		if key != "messageId" {
			return false
		}
		id := s // not &s, which would put s on the heap in every case
		mc.MessageId = &id
	}
	return true
}

// peek returns the byte at p.i after whitespace, or 0 at the end.
func (p *parser) peek() byte {
	p.ws()
	if p.i >= len(p.data) {
		return 0
	}
	return p.data[p.i]
}

// protoValue parses the value at p.i straight into a google.protobuf
// Value, as toValue of value's result would make it.
func (p *parser) protoValue() (*structpb.Value, bool) {
	switch c := p.peek(); {
	case c == '{':
		x := &pbStruct{}
		x.k.StructValue = &x.s
		x.v.Kind = &x.k
		return &x.v, p.protoFields(&x.s)
	case c == '[':
		return p.protoList()
	case c == '"':
		s, ok := p.text()
		if !ok {
			return nil, false
		}
		return newPBString(s), true
	case c == '-' || '0' <= c && c <= '9':
		n, ok := p.numberBytes()
		if !ok {
			return nil, false
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			// Out of float64 range: kept as digits, as toValue keeps it.
			return newPBString(string(n)), true
		}
		x := &pbNumber{k: structpb.Value_NumberValue{NumberValue: f}}
		x.v.Kind = &x.k
		return &x.v, true
	case c == 't' || c == 'f':
		b := c == 't'
		x := &pbBool{k: structpb.Value_BoolValue{BoolValue: b}}
		x.v.Kind = &x.k
		return &x.v, b && p.literal("true") || !b && p.literal("false")
	case c == 'n':
		x := &pbNull{}
		x.v.Kind = &x.k
		return &x.v, p.literal("null")
	}
	return nil, false
}

// protoList parses the array at p.i into a google.protobuf Value.
func (p *parser) protoList() (*structpb.Value, bool) {
	if p.depth++; p.depth > maxParseDepth {
		return nil, false
	}
	p.i++ // [
	x := &pbList{}
	x.k.ListValue = &x.l
	x.v.Kind = &x.k
	if p.peek() == ']' {
		p.i++
		p.depth--
		return &x.v, true
	}
	base := len(p.vals)
	defer func() {
		clear(p.vals[base:])
		p.vals = p.vals[:base]
	}()
	for {
		v, ok := p.protoValue()
		if !ok {
			return nil, false
		}
		p.vals = append(p.vals, v)
		end, ok := p.next(']')
		if !ok {
			return nil, false
		}
		if end {
			break
		}
	}
	x.l.Values = make([]*structpb.Value, len(p.vals)-base)
	copy(x.l.Values, p.vals[base:])
	p.depth--
	return &x.v, true
}

// protoStruct parses the object at p.i straight into a google.protobuf
// Struct, the last of duplicate members winning as in value's maps.
func (p *parser) protoStruct() (*structpb.Struct, bool) {
	s := &structpb.Struct{}
	return s, p.protoFields(s)
}

// protoFields parses the object at p.i into s.
func (p *parser) protoFields(s *structpb.Struct) bool {
	s.Fields = map[string]*structpb.Value{}
	return p.members(func(k string) bool {
		v, ok := p.protoValue()
		s.Fields[k] = v
		return ok
	})
}

// A google.protobuf Value that protoValue makes is allocated with its
// kind's oneof wrapper (and a Struct or list with its message) in one
// object: structpb.NewStringValue and the like allocate each apart.
type (
	pbString struct {
		v structpb.Value
		k structpb.Value_StringValue
	}
	pbNumber struct {
		v structpb.Value
		k structpb.Value_NumberValue
	}
	pbBool struct {
		v structpb.Value
		k structpb.Value_BoolValue
	}
	pbNull struct {
		v structpb.Value
		k structpb.Value_NullValue
	}
	pbStruct struct {
		v structpb.Value
		k structpb.Value_StructValue
		s structpb.Struct
	}
	pbList struct {
		v structpb.Value
		k structpb.Value_ListValue
		l structpb.ListValue
	}
)

func newPBString(s string) *structpb.Value {
	x := &pbString{k: structpb.Value_StringValue{StringValue: s}}
	x.v.Kind = &x.k
	return &x.v
}
