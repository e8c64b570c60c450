package main

import (
	"bytes"
	"testing"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// TestTextPrinter checks what the demo turn does not show: an ACP v2
// whole message sent again as it grows is printed once, thoughts are
// marked on each line, and a tool call's update that keeps its status adds
// no line.
func TestTextPrinter(t *testing.T) {
	t.Parallel()
	text := func(s string) *acpv2.ContentBlock {
		return &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}
	}
	message := func(id, s string) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentMessage{AgentMessage: &acpv2.MessageUpdate{MessageId: id,
			Content: &acpv2.ContentBlockPatch{Op: &acpv2.ContentBlockPatch_Value{Value: &acpv2.ContentBlockList{Items: []*acpv2.ContentBlock{text(s)}}}}}}}
	}
	thought := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentThoughtChunk{AgentThoughtChunk: &acpv2.ContentChunk{Content: text("a\nb")}}}
	tool := func(status string) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{ToolCallId: "c1", Title: "Grep", Kind: "search", Status: status}}}
	}
	var b bytes.Buffer
	p := newTextPrinter(&b)
	for _, ev := range []*acpv2.SessionEvent{thought, message("m1", "Hel"), message("m1", "Hello"), message("m1", "Hello."),
		tool(""), tool(""), tool("in_progress"), message("m2", "Done")} {
		if err := p.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	p.done()
	want := "(thinking) a\n(thinking) b\nHello.\n* Grep (search): pending\n* Grep (search): in_progress\nDone\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// What an agent says reaches the terminal without its control characters:
// an escape sequence in a message, a tool call's title or output would
// otherwise act on the user's terminal (set its title, write the
// clipboard, clear the screen).
func TestTextPrinterShowsNoEscapeSequences(t *testing.T) {
	t.Parallel()
	text := func(s string) *acpv2.ContentBlock {
		return &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}
	}
	var b bytes.Buffer
	p := newTextPrinter(&b)
	for _, ev := range []*acpv2.SessionEvent{
		{Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Content: text("hi\x1b]52;c;cHduZWQ=\x07\n")}}},
		{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{ToolCallId: "c1", Title: "Run\x1b[2J\u009b31m", Status: "completed",
			Content: []*acpv2.ToolCallContent{{Item: &acpv2.ToolCallContent_Content{Content: text("out\x1b[1m\tput\r")}}}}}},
	} {
		if err := p.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	p.done()
	want := "hi ]52;c;cHduZWQ= \n* Run [2J 31m: completed\n  | out [1m\tput \n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
