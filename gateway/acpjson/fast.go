package acpjson

import (
	"encoding/json"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The fast path: the updates agents send most (tool-call patches and
// content chunks, message chunks), in their plain shapes, decoded straight
// into the generated types rather than through protoreflect, which took
// two thirds of a line's decoding. Anything it does not know member by
// member (an extra member, a value of another shape, another kind of
// content) makes it decline, and the generic decoder decodes the update:
// the two give equal messages wherever the fast path decodes
// (FuzzFastPathMatchesGeneric).

// fastUpdate decodes obj, an update whose discriminator is tag, or returns
// nil.
func (d *decoder) fastUpdate(tag string, obj map[string]any) *acpv2.SessionUpdate {
	switch tag {
	case "tool_call_update", "tool_call":
		v := d.version
		if tag == "tool_call" {
			v = V1
		}
		u, tc := newToolCallUpdate()
		if fastToolCallUpdate(tc, obj, v) {
			return u
		}
	case "tool_call_content_chunk":
		u, c := newContentChunkUpdate()
		if fastContentChunk(c, obj) {
			return u
		}
	case "agent_message_chunk", "agent_thought_chunk", "user_message_chunk":
		u, c := newChunkUpdate(tag)
		if fastChunk(c, obj) {
			return u
		}
	}
	return nil
}

// fastToolCallUpdate decodes into u a tool_call_update (or a v1
// tool_call) whose members are all ToolCallUpdate's, or reports that it
// cannot. A null patch member clears the field, except from a v1 agent,
// where it leaves it unchanged.
func fastToolCallUpdate(u *acpv2.ToolCallUpdate, obj map[string]any, v Version) bool {
	for key, val := range obj {
		if !toolCallMember(u, key, val, v) {
			return false
		}
	}
	return u.ToolCallId != "" // required: the generic decoder says so
}

// toolCallMember decodes one member of a tool_call_update into u, or
// reports that the fast path cannot.
func toolCallMember(u *acpv2.ToolCallUpdate, key string, val any, v Version) bool {
	if val == nil {
		if v == V1 {
			_, known := fastPatchKeys[key]
			return known
		}
		return fastClear(u, key)
	}
	ok := true
	switch key {
	case "sessionUpdate":
	case "toolCallId":
		u.ToolCallId, ok = val.(string)
	case "title":
		u.Title, ok = stringPatch(val)
	case "kind":
		u.Kind, ok = stringPatch(val)
	case "status":
		u.Status, ok = stringPatch(val)
	case "content":
		var items []*acpv2.ToolCallContent
		if items, ok = fastList(val, fastToolCallContent); ok {
			u.Content = contentPatch(items)
		}
	case "locations":
		var locs []*acpv2.ToolCallLocation
		if locs, ok = fastList(val, fastLocation); ok {
			u.Locations = locationsPatch(locs)
		}
	case "rawInput":
		u.RawInput = valuePatch(toValue(val))
	case "rawOutput":
		u.RawOutput = valuePatch(toValue(val))
	case "_meta":
		var m *structpb.Struct
		if m, ok = fastStruct(val); ok {
			u.Meta = structPatch(m)
		}
	default:
		return false
	}
	return ok
}

// fastPatchKeys are ToolCallUpdate's patch members.
var fastPatchKeys = map[string]struct{}{
	"title": {}, "kind": {}, "status": {}, "content": {}, "locations": {}, "rawInput": {}, "rawOutput": {}, "_meta": {},
}

// fastClear sets the patch member key of u to clear.
func fastClear(u *acpv2.ToolCallUpdate, key string) bool {
	null := structpb.NullValue_NULL_VALUE
	switch key {
	case "title":
		u.Title = &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{Clear: null}}
	case "kind":
		u.Kind = &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{Clear: null}}
	case "status":
		u.Status = &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{Clear: null}}
	case "content":
		u.Content = &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Clear{Clear: null}}
	case "locations":
		u.Locations = &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Clear{Clear: null}}
	case "rawInput":
		u.RawInput = &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Clear{Clear: null}}
	case "rawOutput":
		u.RawOutput = &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Clear{Clear: null}}
	case "_meta":
		u.Meta = &acpv2.StructPatch{Op: &acpv2.StructPatch_Clear{Clear: null}}
	default:
		return false
	}
	return true
}

func stringPatch(val any) (*acpv2.StringPatch, bool) {
	s, ok := val.(string)
	if !ok {
		return nil, false
	}
	return newStringPatch(s), true
}

// fastList decodes a JSON array with item, declining when any item does.
func fastList[T any](val any, item func(any) (T, bool)) ([]T, bool) {
	arr, ok := val.([]any)
	if !ok {
		return nil, false
	}
	out := make([]T, len(arr))
	for i, v := range arr {
		if out[i], ok = item(v); !ok {
			return nil, false
		}
	}
	return out, true
}

// fastStruct decodes a JSON object, or null (absent), into a Struct.
func fastStruct(val any) (*structpb.Struct, bool) {
	switch v := val.(type) {
	case nil:
		return nil, true
	case map[string]any:
		return toStruct(v), true
	}
	return nil, false
}

// optString decodes a JSON string, or null (absent), into an optional
// string.
func optString(val any) (*string, bool) {
	switch v := val.(type) {
	case nil:
		return nil, true
	case string:
		return &v, true
	}
	return nil, false
}

// plainString decodes a JSON string, or null (the empty string).
func plainString(val any) (string, bool) {
	switch v := val.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	}
	return "", false
}

// eachMember calls f with each member of obj, and reports whether f took
// them all.
func eachMember(obj map[string]any, f func(key string, v any) bool) bool {
	for key, v := range obj {
		if !f(key, v) {
			return false
		}
	}
	return true
}

// fastToolCallContent decodes a tool-call content item of type content,
// diff or terminal.
func fastToolCallContent(val any) (*acpv2.ToolCallContent, bool) {
	obj, ok := val.(map[string]any)
	if !ok {
		return nil, false
	}
	var c *acpv2.ToolCallContent
	// item takes the variant's own members.
	var item func(key string, v any) bool
	switch obj["type"] {
	case "content":
		block, ok := fastContentBlock(obj["content"])
		if !ok {
			return nil, false
		}
		c = newContentItem(block)
		item = func(key string, _ any) bool { return key == "content" }
	case "diff":
		d := newDiffItem()
		c = &d.c
		item = func(key string, v any) bool {
			s, ok := v.(string)
			if !ok && v != nil {
				return false
			}
			switch key {
			case "path":
				d.setPath(s, ok)
			case "oldText":
				d.setOldText(s, ok)
			case "newText":
				d.setNewText(s, ok)
			default:
				return false
			}
			return true
		}
	case "terminal":
		var term *acpv2.Terminal
		c, term = newTerminalItem()
		item = func(key string, v any) (ok bool) {
			if key == "terminalId" {
				term.TerminalId, ok = plainString(v)
			}
			return ok
		}
	default:
		return nil, false
	}
	ok = eachMember(obj, func(key string, v any) (ok bool) {
		switch key {
		case "type":
			return true
		case "_meta":
			c.Meta, ok = fastStruct(v)
			return ok
		}
		return item(key, v)
	})
	return c, ok
}

// fastContentBlock decodes a text content block without annotations.
func fastContentBlock(val any) (*acpv2.ContentBlock, bool) {
	obj, ok := val.(map[string]any)
	if !ok || obj["type"] != "text" {
		return nil, false
	}
	block, text := newTextBlock()
	ok = eachMember(obj, func(key string, v any) (ok bool) {
		switch key {
		case "type":
			return true
		case "text":
			text.Text, ok = plainString(v)
		case "_meta":
			text.Meta, ok = fastStruct(v)
		}
		return ok
	})
	return block, ok
}

// fastLocation decodes a tool-call location.
func fastLocation(val any) (*acpv2.ToolCallLocation, bool) {
	obj, ok := val.(map[string]any)
	if !ok {
		return nil, false
	}
	x := &location{}
	loc := &x.l
	ok = eachMember(obj, func(key string, v any) (ok bool) {
		switch key {
		case "path":
			loc.Path, ok = plainString(v)
		case "line":
			switch n := v.(type) {
			case nil:
				return true
			case json.Number:
				line, err := strconv.ParseUint(string(n), 10, 32)
				if err != nil {
					return false
				}
				x.setLine(uint32(line))
				return true
			}
		case "_meta":
			loc.Meta, ok = fastStruct(v)
		}
		return ok
	})
	return loc, ok
}

// fastContentChunk decodes a tool_call_content_chunk into c, or reports
// that it cannot.
func fastContentChunk(c *acpv2.ToolCallContentChunk, obj map[string]any) bool {
	return eachMember(obj, func(key string, v any) bool { return contentChunkMember(c, key, v) }) &&
		requiredChunk(c)
}

// requiredChunk reports whether c has what the generic decoder requires
// of it.
func requiredChunk(c *acpv2.ToolCallContentChunk) bool {
	return c.ToolCallId != "" && c.Content != nil
}

// contentChunkMember decodes one member of a tool_call_content_chunk.
func contentChunkMember(c *acpv2.ToolCallContentChunk, key string, v any) (ok bool) {
	switch key {
	case "sessionUpdate":
		return true
	case "toolCallId":
		c.ToolCallId, ok = v.(string)
	case "content":
		c.Content, ok = fastToolCallContent(v)
	case "_meta":
		c.Meta, ok = fastStruct(v)
	}
	return ok
}

// fastChunk decodes a message or thought chunk into c, or reports that it
// cannot.
func fastChunk(c *acpv2.ContentChunk, obj map[string]any) bool {
	return eachMember(obj, func(key string, v any) bool { return chunkMember(c, key, v) })
}

// chunkMember decodes one member of a message or thought chunk.
func chunkMember(c *acpv2.ContentChunk, key string, v any) (ok bool) {
	switch key {
	case "sessionUpdate":
		return true
	case "content":
		c.Content, ok = fastContentBlock(v)
	case "messageId":
		c.MessageId, ok = optString(v)
	case "_meta":
		c.Meta, ok = fastStruct(v)
	}
	return ok
}
