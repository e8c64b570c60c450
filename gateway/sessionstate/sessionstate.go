// Package sessionstate materialises what a session's events leave
// standing besides its tool calls (which gateway/merge keeps): the mode,
// the configuration options, the commands, the title, the usage, the plan,
// the display terminals, the permission requests and elicitations waiting
// for an answer, and whether a turn runs. A client renders its UI from it (GetSession,
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

	"github.com/acp-gateway/acp-gateway/internal/textcut"

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
	// MaxPending is the most bytes (as protobuf) the pending permission
	// requests and elicitations take whole, together: a request past it
	// is kept cut as one over MaxPart is (thinRequest, thinElicitation),
	// with what answering it needs.
	MaxPending = 4 * MaxPart
	// MaxBytes bounds a State as protobuf (its record, and what it adds
	// to a snapshot besides the previews), with at most
	// DefaultPendingBound requests waiting: each part's bound, summed.
	MaxBytes = 4*MaxPart + 3*maxText + maxUsage + MaxFirstPrompt + 64 +
		MaxTerminals*(maxID+2*maxText+MaxTerminalOutput+maxExit+64) +
		MaxPending + DefaultPendingBound*maxThinRequest
	// DefaultPendingBound is the number of waiting requests (permission
	// requests and elicitations together) MaxBytes counts: the session's
	// default cap on them.
	DefaultPendingBound = 64
	// maxText bounds a terminal's command and cwd, and the title.
	maxText = 4 << 10
	// maxID bounds a terminal's id.
	maxID = 256
	// maxUsage bounds the usage kept whole; past it only its numbers and
	// currency are kept.
	maxUsage = 4 << 10
	// maxExit bounds a terminal's exit status kept whole; past it only
	// its exitCode and signal are kept.
	maxExit = 1 << 10
	// maxThinOptions bounds a cut request's options, and the url or
	// requested schema a cut elicitation keeps; maxThinRequest the whole
	// of a cut request or elicitation.
	maxThinOptions = 4 << 10
	maxThinRequest = maxThinOptions + 2<<10
	// thinOptions bounds the options of a request that Thin cuts;
	// thinAnswer the url or requested schema of an elicitation it cuts.
	thinOptions = 512
	thinAnswer  = 1 << 10
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
		m := &acpv2.SessionModeState{CurrentModeId: clip(v.CurrentModeUpdate.GetCurrentModeId(), maxText)}
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
		s.Usage = capUsage(v.UsageUpdate)
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
				t.ExitStatus = capExit(u.GetExitStatus().GetValue())
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
		if size := proto.Size(r); size > MaxPart || st.held()+size > MaxPending {
			r = thinRequest(r, maxThinOptions)
		}
		s.PendingPermissions = append(s.PendingPermissions[:len(s.PendingPermissions):len(s.PendingPermissions)], r)
	case *acpv2.SessionEvent_PermissionResolved:
		kept, ok := without(s.PendingPermissions, v.PermissionResolved.GetRequestId())
		if !ok {
			return false
		}
		s.PendingPermissions = kept
	case *acpv2.SessionEvent_ElicitationRequest:
		r := v.ElicitationRequest
		if size := proto.Size(r); size > MaxPart || st.held()+size > MaxPending {
			r = thinElicitation(r, maxThinOptions)
		}
		s.PendingElicitations = append(s.PendingElicitations[:len(s.PendingElicitations):len(s.PendingElicitations)], r)
	case *acpv2.SessionEvent_ElicitationResolved:
		kept, ok := without(s.PendingElicitations, v.ElicitationResolved.GetRequestId())
		if !ok {
			return false
		}
		s.PendingElicitations = kept
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
	changed := s.TurnRunning || len(s.PendingPermissions) > 0 || len(s.PendingElicitations) > 0
	s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt = false, 0, nil
	s.PendingPermissions, s.PendingElicitations = nil, nil
	return changed
}

// without returns a new list of the requests of pending but request id,
// and whether id was among them (the list given may be shared by a
// snapshot: it is not changed).
func without[R interface{ GetRequestId() string }](pending []R, id string) ([]R, bool) {
	kept := make([]R, 0, len(pending))
	for _, r := range pending {
		if r.GetRequestId() != id {
			kept = append(kept, r)
		}
	}
	return kept, len(kept) < len(pending)
}

// held is the bytes (as protobuf) the pending permission requests and
// elicitations take.
func (st *State) held() int {
	n := 0
	for _, p := range st.s.PendingPermissions {
		n += proto.Size(p)
	}
	for _, e := range st.s.PendingElicitations {
		n += proto.Size(e)
	}
	return n
}

// Fill sets the state fields of snap from the state, sharing its messages.
func (st *State) Fill(snap *acpv2.SessionSnapshot) {
	s := &st.s
	snap.Modes, snap.ConfigOptions, snap.AvailableCommands = s.Modes, s.ConfigOptions, s.AvailableCommands
	snap.Title, snap.Usage, snap.Plan, snap.Terminals = s.Title, s.Usage, s.Plan, s.Terminals
	snap.PendingPermissions, snap.PendingElicitations = s.PendingPermissions, s.PendingElicitations
	snap.TurnRunning, snap.TurnStartedSeq, snap.TurnStartedAt = s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt
	snap.FirstPrompt = s.FirstPrompt
}

// Thin cuts the state fields of snap, a snapshot the caller owns (their
// values may be shared: they are replaced, not modified), to what a
// client needs to show the session and answer its requests, for a
// response too small for the whole: the current mode without the modes
// offered, the usage's numbers, the terminals without their output
// (output_truncated set), the pending requests cut (thinRequest: their
// options to 512 bytes, at least one; no preview), the pending
// elicitations cut (thinElicitation: a url or requested schema of up to
// 1 KiB), the title and first prompt; the configuration options, the
// commands and the plan are left out.
func Thin(snap *acpv2.SessionSnapshot) {
	if m := snap.GetModes(); m != nil {
		snap.Modes = &acpv2.SessionModeState{CurrentModeId: clip(m.GetCurrentModeId(), maxID)}
	}
	snap.ConfigOptions, snap.AvailableCommands, snap.Plan = nil, nil, nil
	if u := snap.GetUsage(); u != nil {
		snap.Usage = capUsage(&acpv2.UsageUpdate{Used: u.Used, Size: u.Size, Cost: u.GetCost(), InputTokens: u.InputTokens, OutputTokens: u.OutputTokens})
	}
	terms := make([]*acpv2.SessionTerminal, len(snap.GetTerminals()))
	for i, t := range snap.GetTerminals() {
		terms[i] = &acpv2.SessionTerminal{TerminalId: clip(t.GetTerminalId(), maxID), Command: clip(t.GetCommand(), 256), Cwd: clip(t.GetCwd(), 256),
			OutputTruncated: len(t.GetOutput()) > 0 || t.GetOutputTruncated(), ExitStatus: capExit(t.GetExitStatus())}
	}
	snap.Terminals = terms
	pending := make([]*acpv2.PermissionRequest, len(snap.GetPendingPermissions()))
	for i, r := range snap.GetPendingPermissions() {
		pending[i] = thinRequest(r, thinOptions)
	}
	snap.PendingPermissions = pending
	elicits := make([]*acpv2.ElicitationRequest, len(snap.GetPendingElicitations()))
	for i, r := range snap.GetPendingElicitations() {
		elicits[i] = thinElicitation(r, thinAnswer)
	}
	snap.PendingElicitations = elicits
}

// Summarise sets the state fields of a session's summary.
func (st *State) Summarise(sum *acpv2.SessionSummary) {
	s := &st.s
	sum.Title, sum.FirstPrompt = s.Title, s.FirstPrompt
	sum.TurnRunning, sum.TurnStartedSeq, sum.TurnStartedAt = s.TurnRunning, s.TurnStartedSeq, s.TurnStartedAt
	sum.PendingPermissions = uint32(len(s.PendingPermissions))
	sum.PendingElicitations = uint32(len(s.PendingElicitations))
}

// terminal applies change to a copy of terminal id (a new one when
// unseen), which then takes its place: the one replaced may be shared
// by a snapshot.
func (st *State) terminal(id string, change func(*acpv2.SessionTerminal)) {
	s := &st.s
	id = clip(id, maxID)
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
		t = &acpv2.SessionTerminal{TerminalId: id}
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

// capUsage returns u, or its numbers and currency when it is over
// maxUsage (its meta and extra are the agent's to fill).
func capUsage(u *acpv2.UsageUpdate) *acpv2.UsageUpdate {
	if proto.Size(u) <= maxUsage {
		return u
	}
	out := &acpv2.UsageUpdate{Used: u.Used, Size: u.Size, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	if c := u.GetCost(); c != nil {
		out.Cost = &acpv2.Cost{Amount: c.GetAmount(), Currency: clip(c.GetCurrency(), 64)}
	}
	return out
}

// capExit returns a terminal's exit status, or its exitCode and signal
// (cut to 64 bytes) when it is over maxExit.
func capExit(e *structpb.Struct) *structpb.Struct {
	if proto.Size(e) <= maxExit {
		return e
	}
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if v, ok := e.GetFields()["exitCode"]; ok && v.GetNumberValue() == v.GetNumberValue() {
		out.Fields["exitCode"] = structpb.NewNumberValue(v.GetNumberValue())
	}
	if v := e.GetFields()["signal"].GetStringValue(); v != "" {
		out.Fields["signal"] = structpb.NewStringValue(clip(v, 64))
	}
	return out
}

// thinRequest is a permission request cut to what answering it needs:
// its id, its title (cut to 256 bytes), its tool call's id, title, kind
// and status, and the ids, names (256) and kinds (64) of its first
// options that fit in optionBytes, at least one (an option whose id is
// longer than maxText is left out). It has the trimmed meta.
func thinRequest(r *acpv2.PermissionRequest, optionBytes int) *acpv2.PermissionRequest {
	var opts []*acpv2.PermissionOption
	total := 0
	for _, o := range r.GetOptions() {
		if len(o.GetOptionId()) > maxText {
			continue
		}
		thin := &acpv2.PermissionOption{OptionId: o.GetOptionId(), Name: clip(o.GetName(), 256), Kind: clip(o.GetKind(), 64)}
		if total += proto.Size(thin) + 8; total > optionBytes && len(opts) > 0 {
			break
		}
		opts = append(opts, thin)
	}
	return &acpv2.PermissionRequest{
		RequestId: clip(r.GetRequestId(), 64),
		ToolCall:  thinUpdate(r.GetToolCall()),
		Options:   opts,
		Title:     clip(r.GetTitle(), 256),
		Meta:      trimmedMeta(),
	}
}

// thinElicitation is an elicitation cut to what answering it needs: its
// id, mode (cut to 64 bytes), message (256), elicitation id and tool call
// id (256 each), and its url or requested schema when that takes at most
// answerBytes (a cut url or schema would be a wrong one: past that it is
// left out, and is in the elicitationRequest event). It has the trimmed
// meta; a custom mode's other members (meta.params) are left out.
func thinElicitation(r *acpv2.ElicitationRequest, answerBytes int) *acpv2.ElicitationRequest {
	out := &acpv2.ElicitationRequest{
		RequestId:     clip(r.GetRequestId(), 64),
		Mode:          clip(r.GetMode(), 64),
		Message:       clip(r.GetMessage(), 256),
		ElicitationId: clip(r.GetElicitationId(), maxID),
		ToolCallId:    clip(r.GetToolCallId(), maxID),
		Meta:          trimmedMeta(),
	}
	if len(r.GetUrl()) <= answerBytes {
		out.Url = r.GetUrl()
	}
	if schema := r.GetRequestedSchema(); schema != nil && proto.Size(schema) <= answerBytes {
		out.RequestedSchema = schema
	}
	return out
}

func trimmedMeta() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"acpGateway": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"trimmed": structpb.NewBoolValue(true)}})}}
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
		ToolCallId: clip(u.GetToolCallId(), 256),
		Title:      thin(u.GetTitle(), 256),
		Kind:       thin(u.GetKind(), 64),
		Status:     thin(u.GetStatus(), 64),
		Meta:       &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: trimmedMeta()}},
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
func clip(s string, n int) string { return textcut.Prefix(s, n) }
