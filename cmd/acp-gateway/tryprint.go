package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// turnPrinter shows the events of try's turn.
type turnPrinter interface {
	// session is told the session's id once it is created.
	session(id string)
	// event shows one event of the stream.
	event(ev *acpv2.SessionEvent) error
	// answering says that try answers permission request pr with option
	// (cancelled when option is "").
	answering(pr *acpv2.PermissionRequest, option string)
	// note says what try did, on a line of its own.
	note(msg string)
	// done ends the output: the last line is finished.
	done()
}

// jsonPrinter prints every event as one line of compact proto JSON, and
// what try does as `#` comments (try --json).
type jsonPrinter struct{ out io.Writer }

func (p jsonPrinter) session(id string) { fmt.Fprintf(p.out, "# session %s\n", id) }

func (p jsonPrinter) event(ev *acpv2.SessionEvent) error {
	js, err := protojson.Marshal(ev)
	if err != nil {
		return err
	}
	// protojson varies its spacing on purpose; print it compact.
	var line bytes.Buffer
	if err := json.Compact(&line, js); err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.out, "%s\n", line.Bytes())
	return err
}

func (p jsonPrinter) answering(pr *acpv2.PermissionRequest, option string) {
	fmt.Fprintf(p.out, "# answering %s with %q\n", pr.GetRequestId(), option)
}

func (p jsonPrinter) note(msg string) { fmt.Fprintf(p.out, "# %s\n", msg) }

func (jsonPrinter) done() {}

// textPrinter prints the turn for a person: the agent's text as it
// streams, its thoughts and plan, each tool call as one line each time its
// status changes, the diffs it carries, and the permission requests with
// their answers.
type textPrinter struct {
	out io.Writer
	// inText is the kind of chunk whose line is open ("text",
	// "thought"), or "" at the start of a line.
	inText string
	// tools holds what was shown of each tool call: its status and the
	// diffs printed.
	tools map[string]*shownTool
	// plan is the status of each plan entry last shown.
	plan map[string]string
	// options names the options of each permission request.
	options map[string]map[string]string
	// messages holds the text shown of each whole message, by id.
	messages map[string]string
}

type shownTool struct {
	status string
	diffs  map[string]bool
}

func newTextPrinter(out io.Writer) *textPrinter {
	return &textPrinter{out: terminalText{out}, tools: map[string]*shownTool{}, plan: map[string]string{}, options: map[string]map[string]string{}, messages: map[string]string{}}
}

// terminalText writes to a terminal what an agent says with its control
// characters but newline and tab (its escape sequences) shown as spaces
// (printable), so that they do not act on the terminal.
type terminalText struct{ w io.Writer }

func (t terminalText) Write(b []byte) (int, error) {
	if _, err := io.WriteString(t.w, strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return ' '
		}
		return r
	}, string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *textPrinter) session(id string) { p.line("session %s", id) }

// line prints a line of its own, ending the streaming text first.
func (p *textPrinter) line(format string, args ...any) {
	p.endText()
	fmt.Fprintf(p.out, format+"\n", args...)
}

func (p *textPrinter) endText() {
	if p.inText != "" {
		fmt.Fprintln(p.out)
		p.inText = ""
	}
}

// text streams a chunk of kind ("text", "thought").
func (p *textPrinter) text(kind, s string) {
	if s == "" {
		return
	}
	if p.inText != kind {
		p.endText()
		if kind == "thought" {
			fmt.Fprint(p.out, "(thinking) ")
		}
	}
	// A chunk that ends a line closes it: the next line starts afresh.
	body, closed := strings.CutSuffix(s, "\n")
	if kind == "thought" {
		body = strings.ReplaceAll(body, "\n", "\n(thinking) ")
	}
	fmt.Fprint(p.out, body)
	p.inText = kind
	if closed {
		p.endText()
	}
}

func (p *textPrinter) event(ev *acpv2.SessionEvent) error {
	switch {
	case ev.GetTurnStarted() != nil:
		for _, b := range ev.GetTurnStarted().GetPrompt() {
			if t := b.GetText(); t != nil {
				p.line("> %s", t.GetText())
			}
		}
	case ev.GetAgentMessageChunk() != nil:
		p.text("text", ev.GetAgentMessageChunk().GetContent().GetText().GetText())
	case ev.GetAgentThoughtChunk() != nil:
		p.text("thought", ev.GetAgentThoughtChunk().GetContent().GetText().GetText())
	case ev.GetAgentMessage() != nil:
		// ACP v2's whole message, sent again as it grows: what is new.
		m := ev.GetAgentMessage()
		var text strings.Builder
		for _, b := range m.GetContent().GetValue().GetItems() {
			text.WriteString(b.GetText().GetText())
		}
		shown := p.messages[m.GetMessageId()]
		if rest, ok := strings.CutPrefix(text.String(), shown); ok {
			p.text("text", rest)
		} else {
			p.endText()
			p.text("text", text.String())
		}
		p.messages[m.GetMessageId()] = text.String()
	case ev.GetPlan() != nil:
		p.showPlan(ev.GetPlan().GetEntries())
	case ev.GetToolCall() != nil:
		p.showTool(ev.GetToolCall())
	case ev.GetPermissionRequest() != nil:
		pr := ev.GetPermissionRequest()
		names := map[string]string{}
		var shown []string
		for _, o := range pr.GetOptions() {
			names[o.GetOptionId()] = o.GetName()
			shown = append(shown, o.GetName())
		}
		p.options[pr.GetRequestId()] = names
		title := pr.GetTitle()
		if title == "" {
			title = pr.GetPreview().GetTitle()
		}
		p.line("? permission asked: %s [%s]", title, strings.Join(shown, " / "))
	case ev.GetPermissionResolved() != nil:
		r := ev.GetPermissionResolved()
		answer := "cancelled"
		if id := r.GetOutcome().GetSelectedOptionId(); id != "" {
			answer = id
			if name := p.options[r.GetRequestId()][id]; name != "" {
				answer = fmt.Sprintf("%s (%s)", name, id)
			}
		}
		if by := r.GetAnsweredBy(); by != "" {
			answer += ", by " + by
		}
		p.line("  permission answered: %s", answer)
	case ev.GetStateChanged() != nil:
		if sc := ev.GetStateChanged(); sc.GetDetail() != "" {
			p.line("state: %s (%s)", sc.GetState(), sc.GetDetail())
		}
	case ev.GetTurnEnded() != nil:
		te := ev.GetTurnEnded()
		if te.GetError() != "" {
			p.line("turn failed: %s", te.GetError())
		} else {
			p.line("turn ended: %s", te.GetStopReason())
		}
	}
	return nil
}

// showPlan prints the whole plan the first time, then the entries whose
// status changed.
func (p *textPrinter) showPlan(entries []*acpv2.PlanEntry) {
	first := len(p.plan) == 0
	if first {
		p.line("plan:")
	}
	for _, e := range entries {
		prev, ok := p.plan[e.GetContent()]
		switch {
		case first:
			p.line("  %s %s", planMark(e.GetStatus()), e.GetContent())
		case !ok || prev != e.GetStatus():
			p.line("plan: %s %s", planMark(e.GetStatus()), e.GetContent())
		}
		p.plan[e.GetContent()] = e.GetStatus()
	}
}

func planMark(status string) string {
	switch status {
	case "completed":
		return "[x]"
	case "in_progress":
		return "[~]"
	}
	return "[ ]"
}

// showTool prints a tool call's line when its status is new, and each
// diff of its content once.
func (p *textPrinter) showTool(tc *acpv2.ToolCall) {
	shown := p.tools[tc.GetToolCallId()]
	if shown == nil {
		shown = &shownTool{diffs: map[string]bool{}}
		p.tools[tc.GetToolCallId()] = shown
	}
	if status := statusOrPending(tc.GetStatus()); status != shown.status {
		shown.status = status
		kind := ""
		if tc.GetKind() != "" {
			kind = " (" + tc.GetKind() + ")"
		}
		p.line("* %s%s: %s", tc.GetTitle(), kind, shown.status)
		if s := tc.GetStatus(); s == "completed" || s == "failed" {
			p.showOutput(tc)
		}
	}
	for _, c := range tc.GetContent() {
		d := c.GetDiff()
		if d == nil {
			continue
		}
		key := d.GetPath() + "\x00" + d.GetOldText() + "\x00" + d.GetNewText()
		if shown.diffs[key] {
			continue
		}
		shown.diffs[key] = true
		p.endText()
		writeUnifiedDiff(p.out, d.GetPath(), d.OldText, d.GetNewText())
	}
}

// maxOutputLines bounds the lines of a tool call's text output shown.
const maxOutputLines = 10

// showOutput prints the text content of a finished tool call (a read's
// text, a command's output), indented, its first maxOutputLines lines.
func (p *textPrinter) showOutput(tc *acpv2.ToolCall) {
	var lines []string
	for _, c := range tc.GetContent() {
		if t := c.GetContent().GetText(); t != nil {
			lines = append(lines, splitLines(t.GetText())...)
		}
	}
	for i, l := range lines {
		if i == maxOutputLines {
			p.line("  | (%d more lines)", len(lines)-i)
			break
		}
		p.line("  | %s", l)
	}
}

func statusOrPending(s string) string {
	if s == "" {
		return "pending"
	}
	return s
}

func (p *textPrinter) answering(pr *acpv2.PermissionRequest, option string) {
	if option == "" {
		p.line("  answering: cancelled (no option allows)")
		return
	}
	name := p.options[pr.GetRequestId()][option]
	if name == "" {
		name = option
	}
	p.line("  answering: %s", name)
}

func (p *textPrinter) note(msg string) { p.line("%s", msg) }

func (p *textPrinter) done() { p.endText() }
