package sessionstate

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

func chunk(id string, b []byte) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TerminalOutputChunk{TerminalOutputChunk: &acpv2.TerminalOutputChunk{
		TerminalId: id, Data: base64.StdEncoding.EncodeToString(b)}}}
}

// A terminal keeps its last MaxTerminalOutput bytes, saying it lost the
// rest, and a state its last MaxTerminals terminals; a snapshot taken
// before a change is not changed by it.
func TestTerminalsAreBounded(t *testing.T) {
	st := &State{}
	if !st.Apply(chunk("t", bytes.Repeat([]byte("a"), MaxTerminalOutput))) {
		t.Fatal("a terminal chunk changed nothing")
	}
	before := &acpv2.SessionSnapshot{}
	st.Fill(before)
	st.Apply(chunk("t", []byte("bc")))
	after := &acpv2.SessionSnapshot{}
	st.Fill(after)
	out := after.GetTerminals()[0]
	if len(out.GetOutput()) != MaxTerminalOutput || !bytes.HasSuffix(out.GetOutput(), []byte("abc")) || !out.GetOutputTruncated() {
		t.Errorf("output of %d bytes ending %q, truncated %v", len(out.GetOutput()), out.GetOutput()[len(out.GetOutput())-3:], out.GetOutputTruncated())
	}
	if b := before.GetTerminals()[0]; b.GetOutputTruncated() || bytes.HasSuffix(b.GetOutput(), []byte("bc")) {
		t.Error("a change reached a snapshot taken before it")
	}
	for i := range MaxTerminals {
		st.Apply(chunk(fmt.Sprint("n", i), []byte("x")))
	}
	st.Fill(after)
	if n := len(after.GetTerminals()); n != MaxTerminals || after.GetTerminals()[0].GetTerminalId() != "n0" {
		t.Errorf("%d terminals, the first %q; want %d, the oldest let go", n, after.GetTerminals()[0].GetTerminalId(), MaxTerminals)
	}
}

// A state stored as a record among the tool calls comes back whole, and
// apart from the calls.
func TestRecordRoundTrip(t *testing.T) {
	st := &State{}
	st.Seed(&acpv2.SessionModeState{CurrentModeId: "ask"}, nil)
	st.Apply(&acpv2.SessionEvent{Seq: 3, Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{
		Prompt: []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "hi"}}}}}}})
	rec, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	stored := &acpv2.ToolCall{} // as a store decodes it
	if err := proto.Unmarshal(rec, stored); err != nil {
		t.Fatal(err)
	}
	calls, back, err := FromCalls([]*acpv2.ToolCall{{ToolCallId: "c1"}, stored})
	if err != nil {
		t.Fatal(err)
	}
	snap := &acpv2.SessionSnapshot{}
	back.Fill(snap)
	if len(calls) != 1 || calls[0].GetToolCallId() != "c1" || snap.GetModes().GetCurrentModeId() != "ask" ||
		!snap.GetTurnRunning() || snap.GetTurnStartedSeq() != 3 || snap.GetFirstPrompt() != "hi" {
		t.Errorf("calls %v, state %v", calls, snap)
	}
}

// A hostile agent's state stays within MaxBytes, in memory and as the
// record: 10,000 terminals with long ids, commands and exit statuses, a
// giant title, config option, command and mode lists and a plan far past
// their bound, a usage full of meta, and the default cap of pending
// requests, each with a huge tool call, title and options. Thin cuts it
// further, keeping what answering a request needs.
func TestHostileStateIsBounded(t *testing.T) {
	big := strings.Repeat("\x01", 1<<20)
	huge := &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue(big)}}
	st := &State{}
	many := func(n int, item func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = item(i)
		}
		return out
	}
	var opts []*acpv2.SessionConfigOption
	var cmds []*acpv2.AvailableCommand
	var modes []*acpv2.SessionMode
	var entries []*acpv2.PlanEntry
	for i, name := range many(20000, func(i int) string { return fmt.Sprint(i, strings.Repeat("n", 100)) }) {
		opts = append(opts, &acpv2.SessionConfigOption{Id: name, Name: name})
		cmds = append(cmds, &acpv2.AvailableCommand{Name: name, Description: name})
		modes = append(modes, &acpv2.SessionMode{Id: name, Name: name})
		entries = append(entries, &acpv2.PlanEntry{Content: fmt.Sprint(i, name)})
	}
	st.Seed(&acpv2.SessionModeState{CurrentModeId: big, AvailableModes: modes}, opts)
	apply := func(ev *acpv2.SessionEvent) { st.Apply(ev) }
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_CurrentModeUpdate{CurrentModeUpdate: &acpv2.CurrentModeUpdate{CurrentModeId: big}}})
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_AvailableCommandsUpdate{AvailableCommandsUpdate: &acpv2.AvailableCommandsUpdate{AvailableCommands: cmds}}})
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ConfigOptionUpdate{ConfigOptionUpdate: &acpv2.ConfigOptionUpdate{ConfigOptions: opts}}})
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_Plan{Plan: &acpv2.Plan{Entries: entries}}})
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_SessionInfoUpdate{SessionInfoUpdate: &acpv2.SessionInfoUpdate{Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: big}}}}})
	used := uint64(7)
	apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_UsageUpdate{UsageUpdate: &acpv2.UsageUpdate{Used: &used, Meta: huge, Cost: &acpv2.Cost{Amount: 1, Currency: big, Extra: huge}}}})
	text := func(s string) *acpv2.StringPatch { return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: s}} }
	for i := range 10000 {
		id := fmt.Sprint(i, strings.Repeat("t", 8<<10))
		apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_TerminalUpdate{TerminalUpdate: &acpv2.TerminalUpdate{TerminalId: id, Command: text(big[:8<<10]), Cwd: text(big[:8<<10]),
			ExitStatus: &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: huge}}}}})
		if i >= 10000-MaxTerminals { // the ones kept: each full
			st.Apply(chunk(id, bytes.Repeat([]byte("o"), MaxTerminalOutput+1)))
		}
	}
	var options []*acpv2.PermissionOption
	for i := range 5000 {
		options = append(options, &acpv2.PermissionOption{OptionId: fmt.Sprint("o", i), Name: big[:1000], Kind: "allow_once", Meta: huge})
	}
	// The cap counts permission requests and elicitations together: half
	// of each, each huge.
	for i := range DefaultPendingBound / 2 {
		apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: &acpv2.PermissionRequest{
			RequestId: fmt.Sprint("perm-", i), Title: big, Options: options, Meta: huge,
			ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "c", Title: text(big), RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: structpb.NewStructValue(huge)}}}}}})
	}
	for i := range DefaultPendingBound / 2 {
		e := &acpv2.ElicitationRequest{RequestId: fmt.Sprint("elicit-", i), Mode: "url", Message: big, Meta: huge,
			Url: "https://example.com/login", ElicitationId: big, ToolCallId: big}
		if i%2 == 1 {
			e.Mode, e.Url, e.RequestedSchema = "form", "", huge
		}
		apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationRequest{ElicitationRequest: e}})
	}
	snap := &acpv2.SessionSnapshot{}
	st.Fill(snap)
	rec, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	if size := proto.Size(snap); size > MaxBytes || len(rec) > MaxBytes+64 {
		t.Fatalf("the state takes %d bytes, its record %d; want at most %d", size, len(rec), MaxBytes)
	}
	if n := len(snap.GetTerminals()); n != MaxTerminals {
		t.Errorf("%d terminals, want %d", n, MaxTerminals)
	}
	// Each request can still be answered: its id and an option.
	pend := snap.GetPendingPermissions()
	if len(pend) != DefaultPendingBound/2 {
		t.Fatalf("%d requests pending, want %d", len(pend), DefaultPendingBound/2)
	}
	// Each elicitation can still be answered: its id, mode, and a url's
	// url (a schema this large is left out, and is in its event).
	checkElicits := func(when string, elicits []*acpv2.ElicitationRequest) {
		t.Helper()
		if len(elicits) != DefaultPendingBound/2 {
			t.Fatalf("%s: %d elicitations pending, want %d", when, len(elicits), DefaultPendingBound/2)
		}
		for i, e := range elicits {
			if e.GetRequestId() != fmt.Sprint("elicit-", i) || (i%2 == 0 && (e.GetMode() != "url" || e.GetUrl() != "https://example.com/login")) ||
				(i%2 == 1 && e.GetMode() != "form") || len(e.GetMessage()) > 256 || e.GetMeta().GetFields()["acpGateway"] == nil {
				t.Fatalf("%s: elicitation %d cannot be answered or is not cut: id %q, mode %q, url %q, message of %d bytes, meta %v",
					when, i, e.GetRequestId(), e.GetMode(), e.GetUrl(), len(e.GetMessage()), e.GetMeta())
			}
		}
	}
	checkElicits("kept", snap.GetPendingElicitations())
	for _, r := range pend {
		if !strings.HasPrefix(r.GetRequestId(), "perm-") || len(r.GetOptions()) == 0 || r.GetOptions()[0].GetOptionId() != "o0" {
			t.Fatalf("a pending request cannot be answered: id %q, %d options", r.GetRequestId(), len(r.GetOptions()))
		}
	}
	thin := proto.CloneOf(snap)
	Thin(thin)
	if size := proto.Size(thin); size > 128<<10 {
		t.Errorf("the thin state takes %d bytes", size)
	}
	if p := thin.GetPendingPermissions(); len(p) != DefaultPendingBound/2 || p[0].GetOptions()[0].GetOptionId() != "o0" {
		t.Errorf("the thin state's requests: %d", len(p))
	}
	checkElicits("thin", thin.GetPendingElicitations())
	after := &acpv2.SessionSnapshot{}
	st.Fill(after)
	if !proto.Equal(after, snap) {
		t.Error("Thin changed the state")
	}
}

// A pending elicitation is kept whole while it is small, goes with its
// elicitationResolved, comes back from the record, and is gone once the
// state is ended (its agent gone); past the pending requests' share it is
// kept cut, with its url or small schema.
func TestPendingElicitations(t *testing.T) {
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(st *State, id string, e *acpv2.ElicitationRequest) {
		e.RequestId = id
		if !st.Apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationRequest{ElicitationRequest: e}}) {
			t.Fatalf("elicitation %s changed nothing", id)
		}
	}
	pending := func(st *State) []*acpv2.ElicitationRequest {
		snap := &acpv2.SessionSnapshot{}
		st.Fill(snap)
		sum := &acpv2.SessionSummary{}
		st.Summarise(sum)
		if int(sum.GetPendingElicitations()) != len(snap.GetPendingElicitations()) {
			t.Fatalf("the summary counts %d elicitations, the snapshot has %d", sum.GetPendingElicitations(), len(snap.GetPendingElicitations()))
		}
		return snap.GetPendingElicitations()
	}
	st := &State{}
	form := &acpv2.ElicitationRequest{Mode: "form", Message: "Your name?", RequestedSchema: schema}
	ask(st, "elicit-1", form)
	ask(st, "elicit-2", &acpv2.ElicitationRequest{Mode: "url", Message: "Log in", Url: "https://example.com/", ElicitationId: "e"})
	if st.Apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationResolved{ElicitationResolved: &acpv2.ElicitationResolved{RequestId: "elicit-9"}}}) {
		t.Error("the resolution of an elicitation not pending changed the state")
	}
	if !st.Apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationResolved{ElicitationResolved: &acpv2.ElicitationResolved{RequestId: "elicit-2", Action: "decline"}}}) {
		t.Error("a resolution changed nothing")
	}
	if p := pending(st); len(p) != 1 || !proto.Equal(p[0], form) {
		t.Fatalf("pending %v, want elicit-1 whole", p)
	}
	rec, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	stored := &acpv2.ToolCall{}
	if err := proto.Unmarshal(rec, stored); err != nil {
		t.Fatal(err)
	}
	back, err := FromRecord(stored)
	if err != nil {
		t.Fatal(err)
	}
	if p := pending(back); len(p) != 1 || !proto.Equal(p[0], form) {
		t.Fatalf("from the record: pending %v, want elicit-1 whole", p)
	}
	if !back.EndTurn() || len(pending(back)) != 0 {
		t.Error("an ended state keeps its pending elicitations")
	}

	// Past MaxPending (with what is held already), one is kept cut.
	full := &State{}
	filler := strings.Repeat("m", MaxPart-1024)
	for i := range MaxPending / MaxPart {
		ask(full, fmt.Sprint("elicit-", i), &acpv2.ElicitationRequest{Mode: "url", Message: filler, Url: "https://example.com/", ElicitationId: "e"})
	}
	ask(full, "elicit-last", &acpv2.ElicitationRequest{Mode: "form", Message: filler, RequestedSchema: schema})
	p := pending(full)
	last := p[len(p)-1]
	if len(p) != MaxPending/MaxPart+1 || len(p[0].GetMessage()) != len(filler) || last.GetRequestId() != "elicit-last" ||
		len(last.GetMessage()) != 256 || !proto.Equal(last.GetRequestedSchema(), schema) || last.GetMeta() == nil {
		t.Errorf("past the requests' share: %d pending, the last %q with a message of %d bytes, schema %v, meta %v",
			len(p), last.GetRequestId(), len(last.GetMessage()), last.GetRequestedSchema(), last.GetMeta())
	}
}
