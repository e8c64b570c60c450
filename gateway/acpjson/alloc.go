package acpjson

import (
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The messages the fast and direct paths make are allocated with the
// oneof wrappers (and the patches with the values) they always come with,
// in one object where the generated types' literals take two or three, as
// protoValue does for google.protobuf values. Such a message keeps the
// others of its object alive while it lives: a few dozen bytes.

// newToolCallUpdate returns an update of a tool call, and the tool call.
func newToolCallUpdate() (*acpv2.SessionUpdate, *acpv2.ToolCallUpdate) {
	x := &struct {
		u acpv2.SessionUpdate
		w acpv2.SessionUpdate_ToolCallUpdate
		m acpv2.ToolCallUpdate
	}{}
	x.w.ToolCallUpdate = &x.m
	x.u.Update = &x.w
	return &x.u, &x.m
}

// newContentChunkUpdate returns an update of a tool-call content chunk,
// and the chunk.
func newContentChunkUpdate() (*acpv2.SessionUpdate, *acpv2.ToolCallContentChunk) {
	x := &struct {
		u acpv2.SessionUpdate
		w acpv2.SessionUpdate_ToolCallContentChunk
		m acpv2.ToolCallContentChunk
	}{}
	x.w.ToolCallContentChunk = &x.m
	x.u.Update = &x.w
	return &x.u, &x.m
}

// newChunkUpdate returns the update of a message or thought chunk of kind
// tag, and the chunk.
func newChunkUpdate(tag string) (*acpv2.SessionUpdate, *acpv2.ContentChunk) {
	switch tag {
	case "agent_message_chunk":
		x := &struct {
			u acpv2.SessionUpdate
			w acpv2.SessionUpdate_AgentMessageChunk
			m acpv2.ContentChunk
		}{}
		x.w.AgentMessageChunk = &x.m
		x.u.Update = &x.w
		return &x.u, &x.m
	case "agent_thought_chunk":
		x := &struct {
			u acpv2.SessionUpdate
			w acpv2.SessionUpdate_AgentThoughtChunk
			m acpv2.ContentChunk
		}{}
		x.w.AgentThoughtChunk = &x.m
		x.u.Update = &x.w
		return &x.u, &x.m
	default:
		x := &struct {
			u acpv2.SessionUpdate
			w acpv2.SessionUpdate_UserMessageChunk
			m acpv2.ContentChunk
		}{}
		x.w.UserMessageChunk = &x.m
		x.u.Update = &x.w
		return &x.u, &x.m
	}
}

func newStringPatch(s string) *acpv2.StringPatch {
	x := &struct {
		p acpv2.StringPatch
		w acpv2.StringPatch_Value
	}{w: acpv2.StringPatch_Value{Value: s}}
	x.p.Op = &x.w
	return &x.p
}

func valuePatch(v *structpb.Value) *acpv2.ValuePatch {
	x := &struct {
		p acpv2.ValuePatch
		w acpv2.ValuePatch_Value
	}{w: acpv2.ValuePatch_Value{Value: v}}
	x.p.Op = &x.w
	return &x.p
}

func structPatch(m *structpb.Struct) *acpv2.StructPatch {
	x := &struct {
		p acpv2.StructPatch
		w acpv2.StructPatch_Value
	}{w: acpv2.StructPatch_Value{Value: m}}
	x.p.Op = &x.w
	return &x.p
}

// newStructPatch returns a patch to the value of an empty Struct, and the
// Struct.
func newStructPatch() (*acpv2.StructPatch, *structpb.Struct) {
	x := &struct {
		p acpv2.StructPatch
		w acpv2.StructPatch_Value
		s structpb.Struct
	}{}
	x.w.Value = &x.s
	x.p.Op = &x.w
	return &x.p, &x.s
}

func contentPatch(items []*acpv2.ToolCallContent) *acpv2.ToolCallContentPatch {
	x := &struct {
		p acpv2.ToolCallContentPatch
		w acpv2.ToolCallContentPatch_Value
		l acpv2.ToolCallContentList
	}{l: acpv2.ToolCallContentList{Items: items}}
	x.w.Value = &x.l
	x.p.Op = &x.w
	return &x.p
}

func locationsPatch(locs []*acpv2.ToolCallLocation) *acpv2.ToolCallLocationPatch {
	x := &struct {
		p acpv2.ToolCallLocationPatch
		w acpv2.ToolCallLocationPatch_Value
		l acpv2.ToolCallLocationList
	}{l: acpv2.ToolCallLocationList{Items: locs}}
	x.w.Value = &x.l
	x.p.Op = &x.w
	return &x.p
}

// newTextBlock returns a text content block, and its text.
func newTextBlock() (*acpv2.ContentBlock, *acpv2.TextContent) {
	x := &struct {
		b acpv2.ContentBlock
		w acpv2.ContentBlock_Text
		t acpv2.TextContent
	}{}
	x.w.Text = &x.t
	x.b.Block = &x.w
	return &x.b, &x.t
}

// newContentItem returns a tool-call content item of type content.
func newContentItem(block *acpv2.ContentBlock) *acpv2.ToolCallContent {
	x := &struct {
		c acpv2.ToolCallContent
		w acpv2.ToolCallContent_Content
	}{w: acpv2.ToolCallContent_Content{Content: block}}
	x.c.Item = &x.w
	return &x.c
}

// newTerminalItem returns a tool-call content item of type terminal, and
// its terminal.
func newTerminalItem() (*acpv2.ToolCallContent, *acpv2.Terminal) {
	x := &struct {
		c acpv2.ToolCallContent
		w acpv2.ToolCallContent_Terminal
		t acpv2.Terminal
	}{}
	x.w.Terminal = &x.t
	x.c.Item = &x.w
	return &x.c, &x.t
}

// diffItem is a tool-call content item of type diff, with the strings its
// optional members point to.
type diffItem struct {
	c acpv2.ToolCallContent
	w acpv2.ToolCallContent_Diff
	d acpv2.Diff
	// path, oldText, newText
	s [3]string
}

func newDiffItem() *diffItem {
	x := &diffItem{}
	x.w.Diff = &x.d
	x.c.Item = &x.w
	return x
}

// setPath sets the diff's path to s, or to none unless set.
func (x *diffItem) setPath(s string, set bool) { x.d.Path = x.opt(0, s, set) }

func (x *diffItem) setOldText(s string, set bool) { x.d.OldText = x.opt(1, s, set) }

func (x *diffItem) setNewText(s string, set bool) { x.d.NewText = x.opt(2, s, set) }

func (x *diffItem) opt(i int, s string, set bool) *string {
	if !set {
		return nil
	}
	x.s[i] = s
	return &x.s[i]
}

// location is a tool-call location, with the line it points to.
type location struct {
	l    acpv2.ToolCallLocation
	line uint32
}

func (x *location) setLine(line uint32) {
	x.line = line
	x.l.Line = &x.line
}
