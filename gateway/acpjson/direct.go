package acpjson

import (
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/together"
)

// The direct path: the fast path's updates read straight from a
// notification's bytes, without the map of the update object, and with
// rawInput, rawOutput and _meta parsed straight into google.protobuf
// values rather than into maps that toValue then copies. Strings, content
// and locations are parsed into their fields too (content items and
// locations of other shapes are parsed into values and handed to the fast
// path's functions), and any other member is parsed into a value and
// handed to the fast path's member functions. It takes an update
// only when its first member is sessionUpdate and no member comes twice;
// anything else, and anything the fast path declines, is parsed again
// from the update's start as before. FuzzDirectMatchesParsed checks the
// two give the same notification.

// directUpdate decodes the update object at p.i, or returns ok false with
// p where it was.
func (p *parser) directUpdate(v Version) (*acpv2.SessionUpdate, bool) {
	return retry(p, func() (*acpv2.SessionUpdate, bool) { return p.directMembers(v) })
}

// retry returns what parse parses at p.i or, when it declines, ok false
// with p where it was, for the caller to parse the value another way.
func retry[T any](p *parser, parse func() (T, bool)) (x T, ok bool) {
	start, depth, elems := p.i, p.depth, len(p.elems)
	if x, ok = parse(); ok {
		return x, true
	}
	p.i, p.depth = start, depth
	clear(p.elems[elems:])
	p.elems = p.elems[:elems]
	var none T
	return none, false
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
		// Content and locations, parsed straight into their messages.
		case key == "content" && tc != nil && c == '[':
			items, ok := list(p, p.toolCallContent)
			tc.Content = contentPatch(items)
			return ok
		case key == "content" && cc != nil && c == '{':
			var ok bool
			cc.Content, ok = p.toolCallContent()
			return ok
		case key == "content" && mc != nil && c == '{':
			var ok bool
			mc.Content, ok = p.contentBlock()
			return ok
		case key == "locations" && tc != nil && c == '[':
			locs, ok := list(p, p.location)
			tc.Locations = locationsPatch(locs)
			return ok
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

// The parts of updates: each parsed straight into its message when its
// members are those the fast path takes, each once, the type (of a content
// item or block) first; else parsed into a generic value and decoded by the
// fast path's function, which takes it or declines.

// list parses the array at p.i with item, as fastList decodes it parsed.
func list[T any](p *parser, item func() (T, bool)) ([]T, bool) {
	if p.depth++; p.depth > p.limit {
		return nil, false
	}
	p.i++ // [
	var buf [4]T
	items := buf[:0]
	if p.peek() == ']' {
		p.i++
	} else {
		for {
			x, ok := item()
			if !ok {
				return nil, false
			}
			items = append(items, x)
			end, ok := p.next(']')
			if !ok {
				return nil, false
			}
			if end {
				break
			}
		}
	}
	p.depth--
	out := make([]T, len(items))
	copy(out, items)
	return out, true
}

// toolCallContent parses the tool-call content item at p.i, as
// fastToolCallContent decodes it parsed.
func (p *parser) toolCallContent() (*acpv2.ToolCallContent, bool) {
	return orParsed(p, p.directToolCallContent, fastToolCallContent)
}

// orParsed returns what direct parses at p.i or, when it declines, what
// fast decodes of the value parsed there.
func orParsed[T any](p *parser, direct func() (T, bool), fast func(any) (T, bool)) (T, bool) {
	if x, ok := retry(p, direct); ok {
		return x, true
	}
	val, ok := p.value()
	if !ok {
		var none T
		return none, false
	}
	return fast(val)
}

// Members of a content item, block or location, as bits.
const (
	mType = 1 << iota
	mMeta
	mContent
	mText
	mPath
	mOldText
	mNewText
	mTerminalID
	mLine
)

// partMember returns the bit of a member of a content item, block or
// location, or 0 for any other.
func partMember(key string) uint {
	switch key {
	case "type":
		return mType
	case "_meta":
		return mMeta
	case "content":
		return mContent
	case "text":
		return mText
	case "path":
		return mPath
	case "oldText":
		return mOldText
	case "newText":
		return mNewText
	case "terminalId":
		return mTerminalID
	case "line":
		return mLine
	}
	return 0
}

func (p *parser) directToolCallContent() (*acpv2.ToolCallContent, bool) {
	var (
		c    *acpv2.ToolCallContent
		d    *diffItem
		term *acpv2.Terminal
		// takes are the members of c's type.
		takes, seen uint
	)
	ok := p.members(func(key string) bool {
		m := partMember(key)
		if m&takes == 0 || m&seen != 0 {
			if c != nil || key != "type" || p.peek() != '"' {
				return false
			}
			typ, ok := p.text()
			switch typ {
			case "content":
				c, takes = newContentItem(nil), mContent
			case "diff":
				d, takes = newDiffItem(), mPath|mOldText|mNewText
				c = &d.c
			case "terminal":
				c, term = newTerminalItem()
				takes = mTerminalID
			default:
				return false
			}
			takes |= mMeta
			return ok
		}
		seen |= m
		switch m {
		case mMeta:
			var ok bool
			c.Meta, ok = p.optStruct()
			return ok
		case mContent:
			b, ok := p.contentBlock()
			c.GetItem().(*acpv2.ToolCallContent_Content).Content = b
			return ok
		case mTerminalID:
			var ok bool
			term.TerminalId, ok = p.plainText()
			return ok
		}
		s, set, ok := p.optText()
		switch m {
		case mPath:
			d.setPath(s, set)
		case mOldText:
			d.setOldText(s, set)
		default:
			d.setNewText(s, set)
		}
		return ok
	})
	if !ok || c == nil || c.GetContent() == nil && takes&mContent != 0 {
		return nil, false
	}
	return c, true
}

// contentBlock parses the content block at p.i, as fastContentBlock
// decodes it parsed.
func (p *parser) contentBlock() (*acpv2.ContentBlock, bool) {
	return orParsed(p, p.directContentBlock, fastContentBlock)
}

func (p *parser) directContentBlock() (*acpv2.ContentBlock, bool) {
	var (
		b    *acpv2.ContentBlock
		text *acpv2.TextContent
		seen uint
	)
	ok := p.members(func(key string) bool {
		if b == nil {
			if key != "type" || p.peek() != '"' {
				return false
			}
			typ, ok := p.text()
			if typ != "text" {
				return false
			}
			b, text = newTextBlock()
			return ok
		}
		m := partMember(key)
		if m&(mText|mMeta) == 0 || m&seen != 0 {
			return false
		}
		seen |= m
		var ok bool
		if m == mText {
			text.Text, ok = p.plainText()
		} else {
			text.Meta, ok = p.optStruct()
		}
		return ok
	})
	return b, ok && b != nil
}

// location parses the tool-call location at p.i, as fastLocation decodes
// it parsed.
func (p *parser) location() (*acpv2.ToolCallLocation, bool) {
	return orParsed(p, p.directLocation, fastLocation)
}

func (p *parser) directLocation() (*acpv2.ToolCallLocation, bool) {
	x := &location{}
	var seen uint
	ok := p.members(func(key string) bool {
		m := partMember(key)
		if m&(mPath|mLine|mMeta) == 0 || m&seen != 0 {
			return false
		}
		seen |= m
		var ok bool
		switch m {
		case mPath:
			x.l.Path, ok = p.plainText()
		case mMeta:
			x.l.Meta, ok = p.optStruct()
		default:
			switch c := p.peek(); {
			case c == 'n':
				return p.literal("null")
			case c == '-' || '0' <= c && c <= '9':
				n, ok := p.numberBytes()
				if !ok {
					return false
				}
				line, err := strconv.ParseUint(string(n), 10, 32)
				if err != nil {
					return false
				}
				x.setLine(uint32(line))
				return true
			}
		}
		return ok
	})
	return &x.l, ok
}

// plainText parses a string, or null (the empty string), as plainString
// decodes it parsed.
func (p *parser) plainText() (string, bool) {
	s, _, ok := p.optText()
	return s, ok
}

// optText parses a string, or null (set false), as optString decodes it
// parsed.
func (p *parser) optText() (s string, set, ok bool) {
	switch p.peek() {
	case '"':
		s, ok = p.text()
		return s, true, ok
	case 'n':
		return "", false, p.literal("null")
	}
	return "", false, false
}

// optStruct parses an object, or null (none), as fastStruct decodes it
// parsed.
func (p *parser) optStruct() (*structpb.Struct, bool) {
	switch p.peek() {
	case '{':
		return p.protoStruct()
	case 'n':
		return nil, p.literal("null")
	}
	return nil, false
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
// Value, as toValue of value's result would make it. Each Value is
// allocated with its kind's oneof wrapper (and a Struct or list with its
// message) in one object (see alloc2): structpb.NewStringValue and the
// like allocate each apart.
func (p *parser) protoValue() (*structpb.Value, bool) {
	switch c := p.peek(); {
	case c == '{':
		v, s := together.Three(func(v *structpb.Value, k *structpb.Value_StructValue, s *structpb.Struct) {
			v.Kind, k.StructValue = k, s
		})
		return v, p.protoFields(s)
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
		v, k := together.Two(func(v *structpb.Value, k *structpb.Value_NumberValue) { v.Kind = k })
		k.NumberValue = f
		return v, true
	case c == 't' || c == 'f':
		v, k := together.Two(func(v *structpb.Value, k *structpb.Value_BoolValue) { v.Kind = k })
		k.BoolValue = c == 't'
		return v, k.BoolValue && p.literal("true") || !k.BoolValue && p.literal("false")
	case c == 'n':
		v, _ := together.Two(func(v *structpb.Value, k *structpb.Value_NullValue) { v.Kind = k })
		return v, p.literal("null")
	}
	return nil, false
}

// protoList parses the array at p.i into a google.protobuf Value.
func (p *parser) protoList() (*structpb.Value, bool) {
	if p.depth++; p.depth > p.limit {
		return nil, false
	}
	p.i++ // [
	val, l := together.Three(func(v *structpb.Value, k *structpb.Value_ListValue, l *structpb.ListValue) {
		v.Kind, k.ListValue = k, l
	})
	if p.peek() == ']' {
		p.i++
		p.depth--
		return val, true
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
	l.Values = make([]*structpb.Value, len(p.vals)-base)
	copy(l.Values, p.vals[base:])
	p.depth--
	return val, true
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

// newPBString returns a google.protobuf Value of s, as protoValue makes
// it.
func newPBString(s string) *structpb.Value {
	v, k := together.Two(func(v *structpb.Value, k *structpb.Value_StringValue) { v.Kind = k })
	k.StringValue = s
	return v
}
