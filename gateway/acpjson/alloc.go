package acpjson

import (
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/together"
)

// The messages the fast and direct paths make are allocated with the
// oneof wrappers (and the patches with the values) they always come with,
// in one object (package together), as protoValue does for google.protobuf
// values.

// newToolCallUpdate returns an update of a tool call, and the tool call.
func newToolCallUpdate() (*acpv2.SessionUpdate, *acpv2.ToolCallUpdate) {
	return together.Three(func(u *acpv2.SessionUpdate, w *acpv2.SessionUpdate_ToolCallUpdate, m *acpv2.ToolCallUpdate) {
		u.Update, w.ToolCallUpdate = w, m
	})
}

// newContentChunkUpdate returns an update of a tool-call content chunk,
// and the chunk.
func newContentChunkUpdate() (*acpv2.SessionUpdate, *acpv2.ToolCallContentChunk) {
	return together.Three(func(u *acpv2.SessionUpdate, w *acpv2.SessionUpdate_ToolCallContentChunk, m *acpv2.ToolCallContentChunk) {
		u.Update, w.ToolCallContentChunk = w, m
	})
}

// newChunkUpdate returns the update of a message or thought chunk of kind
// tag, and the chunk.
func newChunkUpdate(tag string) (*acpv2.SessionUpdate, *acpv2.ContentChunk) {
	switch tag {
	case "agent_message_chunk":
		return together.Three(func(u *acpv2.SessionUpdate, w *acpv2.SessionUpdate_AgentMessageChunk, m *acpv2.ContentChunk) {
			u.Update, w.AgentMessageChunk = w, m
		})
	case "agent_thought_chunk":
		return together.Three(func(u *acpv2.SessionUpdate, w *acpv2.SessionUpdate_AgentThoughtChunk, m *acpv2.ContentChunk) {
			u.Update, w.AgentThoughtChunk = w, m
		})
	default:
		return together.Three(func(u *acpv2.SessionUpdate, w *acpv2.SessionUpdate_UserMessageChunk, m *acpv2.ContentChunk) {
			u.Update, w.UserMessageChunk = w, m
		})
	}
}

func newStringPatch(s string) *acpv2.StringPatch {
	p, w := together.Two(func(p *acpv2.StringPatch, w *acpv2.StringPatch_Value) { p.Op = w })
	w.Value = s
	return p
}

func valuePatch(v *structpb.Value) *acpv2.ValuePatch {
	p, w := together.Two(func(p *acpv2.ValuePatch, w *acpv2.ValuePatch_Value) { p.Op = w })
	w.Value = v
	return p
}

func structPatch(m *structpb.Struct) *acpv2.StructPatch {
	p, w := together.Two(func(p *acpv2.StructPatch, w *acpv2.StructPatch_Value) { p.Op = w })
	w.Value = m
	return p
}

// newStructPatch returns a patch to the value of an empty Struct, and the
// Struct.
func newStructPatch() (*acpv2.StructPatch, *structpb.Struct) {
	return together.Three(func(p *acpv2.StructPatch, w *acpv2.StructPatch_Value, s *structpb.Struct) {
		p.Op, w.Value = w, s
	})
}

func contentPatch(items []*acpv2.ToolCallContent) *acpv2.ToolCallContentPatch {
	p, l := together.Three(func(p *acpv2.ToolCallContentPatch, w *acpv2.ToolCallContentPatch_Value, l *acpv2.ToolCallContentList) {
		p.Op, w.Value = w, l
	})
	l.Items = items
	return p
}

func locationsPatch(locs []*acpv2.ToolCallLocation) *acpv2.ToolCallLocationPatch {
	p, l := together.Three(func(p *acpv2.ToolCallLocationPatch, w *acpv2.ToolCallLocationPatch_Value, l *acpv2.ToolCallLocationList) {
		p.Op, w.Value = w, l
	})
	l.Items = locs
	return p
}

// newTextBlock returns a text content block, and its text.
func newTextBlock() (*acpv2.ContentBlock, *acpv2.TextContent) {
	return together.Three(func(b *acpv2.ContentBlock, w *acpv2.ContentBlock_Text, t *acpv2.TextContent) {
		b.Block, w.Text = w, t
	})
}

// newContentItem returns a tool-call content item of type content.
func newContentItem(block *acpv2.ContentBlock) *acpv2.ToolCallContent {
	c, w := together.Two(func(c *acpv2.ToolCallContent, w *acpv2.ToolCallContent_Content) { c.Item = w })
	w.Content = block
	return c
}

// newTerminalItem returns a tool-call content item of type terminal, and
// its terminal.
func newTerminalItem() (*acpv2.ToolCallContent, *acpv2.Terminal) {
	return together.Three(func(c *acpv2.ToolCallContent, w *acpv2.ToolCallContent_Terminal, t *acpv2.Terminal) {
		c.Item, w.Terminal = w, t
	})
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
