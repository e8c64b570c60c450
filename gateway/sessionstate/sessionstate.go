// Package sessionstate materialises what a session's events leave
// standing besides its tool calls (which gateway/merge keeps): the mode,
// the configuration options, the commands, the title, the usage, the plan,
// the display terminals, the permission requests waiting for an answer,
// and whether a turn runs. A client renders its UI from it (GetSession,
// Watch's snapshot) and then follows the events.
//
// A State is fed every event of its session in seq order (Apply); it is
// stored beside the session's tool calls as a Record, so that a gateway
// that restores the session, or reads it from the store, has it without
// the events that retention may have dropped. A State is not safe for
// concurrent use; the messages it hands out are never modified after.
package sessionstate

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Bounds of what a State keeps, so that a snapshot stays a small part of
// a response (the tool calls take the rest).
const (
	// MaxTerminals is how many display terminals are kept: the oldest
	// first seen is let go past it.
	MaxTerminals = 16
	// MaxTerminalOutput is how many of a terminal's last output bytes are
	// kept.
	MaxTerminalOutput = 16 << 10
	// MaxFirstPrompt is how many bytes of the first prompt's text are kept.
	MaxFirstPrompt = 256
	// MaxPart is the most bytes (as protobuf) kept of a list (modes,
	// config options, commands), a plan or a pending request's tool call:
	// a list past it keeps its first items that fit, a plan its first
	// entries, a request its tool call's id, title, kind and status.
	MaxPart = 64 << 10
	// maxText bounds a terminal's command and cwd, and the title.
	maxText = 4 << 10
)

// State is a session's materialised state. The zero State is empty.
type State struct {
	s acpv2.SessionSnapshot // only the state fields are set
}

// Seed applies what session/new, session/resume or session/load answered:
// the session's modes and configuration options (either may be nil, for
// none reported). It reports whether the state changed.
func (st *State) Seed(modes *acpv2.SessionModeState, options []*acpv2.SessionConfigOption) bool {
	changed := false
	if modes != nil {
		st.s.Modes = capModes(modes)
		changed = true
	}
	if options != nil {
		st.s.ConfigOptions = capList(options)
		changed = true
	}
	return changed
}

// Apply applies one event of the session and reports whether the state
// changed. Events that touch no state (messages, tool calls) cost a type
// switch.
func (st *State) Apply(ev *acpv2.SessionEvent) bool {
	s := &st.s
	switch v := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_CurrentModeUpdate:
		m := &acpv2.SessionModeState{CurrentModeId: v.CurrentModeUpdate.GetCurrentModeId()}
		if old := s.GetModes(); old != nil {
			m.AvailableModes, m.Meta, m.Extra = old.GetAvailableModes(), old.GetMeta(), old.GetExtra()
		}
		s.Modes = m
	case *acpv2.SessionEvent_ConfigOptionUpdate:
		s.ConfigOptions = capList(v.ConfigOptionUpdate.GetConfigOptions())
	case *acpv2.SessionEvent_AvailableCommandsUpdate:
		s.AvailableCommands = capList(v.AvailableCommandsUpdate.GetAvailableCommands())
	case *acpv2.SessionEvent_SessionInfoUpdate:
		t := v.SessionInfoUpdate.GetTitle()
		if t == nil {
			return false
		}
		s.Title = clip(t.GetValue(), maxText) // a cleared title is ""
	case *acpv2.SessionEvent_UsageUpdate:
		s.Usage = v.UsageUpdate
	case *acpv2.SessionEvent_Plan:
		p := v.Plan
		s.Plan = capPlan(&acpv2.PlanContent{Content: &acpv2.PlanContent_Items{Items: &acpv2.PlanItems{
			Entries: p.GetEntries(), Meta: p.GetMeta(), Extra: p.GetExtra()}}})
	case *acpv2.SessionEvent_PlanUpdate:
		s.Plan = capPlan(v.PlanUpdate.GetPlan())
	case *acpv2.SessionEvent_TerminalUpdate:
		st.terminal(v.TerminalUpdate.GetTerminalId(), func(t *acpv2.SessionTerminal) {
			u := v.TerminalUpdate
			if u.GetCommand() != nil {
				t.Command = clip(u.GetCommand().GetValue(), maxText)
			}
			if u.GetCwd() != nil {
				t.Cwd = clip(u.GetCwd().GetValue(), maxText)
			}
			if u.GetOutput() != nil {
				data := u.GetOutput().GetValue().GetFields()["data"].GetStringValue()
				b, _ := base64.StdEncoding.DecodeString(data) // what decodes of it
				t.Output, t.OutputTruncated = nil, false
				appendOutput(t, b)
			}
			if u.GetExitStatus() != nil {
				t.ExitStatus = u.GetExitStatus().GetValue()
			}
		})
	case *acpv2.SessionEvent_TerminalOutputChunk:
		st.terminal(v.TerminalOutputChunk.GetTerminalId(), func(t *acpv2.SessionTerminal) {
			b, _ := base64.StdEncoding.DecodeString(v.TerminalOutputChunk.GetData())
			appendOutput(t, b)
		})
	case *acpv2.SessionEvent_PermissionRequest:
		r := proto.CloneOf(v.PermissionRequest)
		// The calls it would preview change: a snapshot makes the preview
		// of the calls as they are then, so none is kept or stored.
		r.Preview = nil
		if proto.Size(r.GetToolCall()) > MaxPart {
			r.ToolCall = thinUpdate(r.GetToolCall())
		}
		s.PendingPermissions = append(s.PendingPermissions[:len(s.PendingPermissions):len(s.PendingPermissions)], r)
	case *acpv2.SessionEvent_PermissionResolved:
		id := v.PermissionResolved.GetRequestId()
		kept := make([]*acpv2.PermissionRequest, 0, len(s.PendingPermissions))
		for _, r := range s.PendingPermissions {
			if r.GetRequestId() != id {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(s.PendingPermissions) {
			return false
		}
		s.PendingPermissions = kept
	case *acpv2.SessionEvent_TurnStarted:
		s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt = true, ev.GetSeq(), ev.GetTime()
		if s.FirstPrompt == "" {
			s.FirstPrompt = promptText(v.TurnStarted.GetPrompt())
		}
	case *acpv2.SessionEvent_TurnEnded:
		st.EndTurn()
	default:
		return false
	}
	return true
}

// EndTurn records that no turn runs and no request waits: what a session
// whose agent is gone, or whose turn ended, holds. It reports whether the
// state changed.
func (st *State) EndTurn() bool {
	s := &st.s
	changed := s.TurnRunning || len(s.PendingPermissions) > 0
	s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt, s.PendingPermissions = false, 0, nil, nil
	return changed
}

// Fill sets the state fields of snap from the state, sharing its messages.
func (st *State) Fill(snap *acpv2.SessionSnapshot) {
	s := &st.s
	snap.Modes, snap.ConfigOptions, snap.AvailableCommands = s.Modes, s.ConfigOptions, s.AvailableCommands
	snap.Title, snap.Usage, snap.Plan, snap.Terminals = s.Title, s.Usage, s.Plan, s.Terminals
	snap.PendingPermissions = s.PendingPermissions
	snap.TurnRunning, snap.TurnStartedSeq, snap.TurnStartedAt = s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt
	snap.FirstPrompt = s.FirstPrompt
}

// Summarise sets the state fields of a session's summary.
func (st *State) Summarise(sum *acpv2.SessionSummary) {
	s := &st.s
	sum.Title, sum.FirstPrompt = s.Title, s.FirstPrompt
	sum.TurnRunning, sum.TurnStartedSeq, sum.TurnStartedAt = s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt
	sum.PendingPermissions = uint32(len(s.PendingPermissions))
}

// terminal applies change to a copy of terminal id (a new one when
// unseen), which then takes its place: the one replaced may be shared
// by a snapshot.
func (st *State) terminal(id string, change func(*acpv2.SessionTerminal)) {
	s := &st.s
	terms := make([]*acpv2.SessionTerminal, 0, len(s.Terminals)+1)
	var t *acpv2.SessionTerminal
	for _, old := range s.Terminals {
		if old.GetTerminalId() == id {
			t = proto.CloneOf(old)
			old = t
		}
		terms = append(terms, old)
	}
	if t == nil {
		t = &acpv2.SessionTerminal{TerminalId: clip(id, maxText)}
		terms = append(terms, t)
		if len(terms) > MaxTerminals {
			terms = terms[len(terms)-MaxTerminals:]
		}
	}
	change(t)
	s.Terminals = terms
}

// appendOutput appends b to t's output, keeping its last
// MaxTerminalOutput bytes.
func appendOutput(t *acpv2.SessionTerminal, b []byte) {
	out := append(t.Output[:len(t.Output):len(t.Output)], b...)
	if over := len(out) - MaxTerminalOutput; over > 0 {
		out, t.OutputTruncated = out[over:], true
	}
	t.Output = out
}

// capList returns list, or its first items that fit in MaxPart bytes.
func capList[M proto.Message](list []M) []M {
	total := 0
	for i, m := range list {
		if total += proto.Size(m) + 8; total > MaxPart {
			return list[:i:i]
		}
	}
	return list
}

func capModes(m *acpv2.SessionModeState) *acpv2.SessionModeState {
	if proto.Size(m) <= MaxPart {
		return m
	}
	return &acpv2.SessionModeState{CurrentModeId: clip(m.GetCurrentModeId(), maxText), AvailableModes: capList(m.GetAvailableModes())}
}

func capPlan(p *acpv2.PlanContent) *acpv2.PlanContent {
	if proto.Size(p) <= MaxPart {
		return p
	}
	if items := p.GetItems(); items != nil {
		return &acpv2.PlanContent{Content: &acpv2.PlanContent_Items{Items: &acpv2.PlanItems{
			PlanId: clip(items.GetPlanId(), maxText), Entries: capList(items.GetEntries())}}}
	}
	return nil // a plan of a type not known, too large to keep
}

// thinUpdate is a tool-call patch cut to what identifies its call.
func thinUpdate(u *acpv2.ToolCallUpdate) *acpv2.ToolCallUpdate {
	thin := func(p *acpv2.StringPatch, n int) *acpv2.StringPatch {
		if p.GetOp() == nil {
			return p
		}
		if _, ok := p.GetOp().(*acpv2.StringPatch_Value); !ok {
			return p
		}
		return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: clip(p.GetValue(), n)}}
	}
	return &acpv2.ToolCallUpdate{
		ToolCallId: u.GetToolCallId(),
		Title:      thin(u.GetTitle(), 256),
		Kind:       thin(u.GetKind(), 64),
		Status:     thin(u.GetStatus(), 64),
		Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: &structpb.Struct{Fields: map[string]*structpb.Value{
			"acpGateway": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"trimmed": structpb.NewBoolValue(true)}})}}}},
	}
}

// promptText is the text of a prompt's text blocks, cut to MaxFirstPrompt
// bytes.
func promptText(prompt []*acpv2.ContentBlock) string {
	var b strings.Builder
	for _, c := range prompt {
		if t := c.GetText().GetText(); t != "" {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(t)
			if b.Len() > MaxFirstPrompt {
				break
			}
		}
	}
	return clip(b.String(), MaxFirstPrompt)
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
