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
	for i := range DefaultPendingBound {
		apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: &acpv2.PermissionRequest{
			RequestId: fmt.Sprint("perm-", i), Title: big, Options: options, Meta: huge,
			ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "c", Title: text(big), RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: structpb.NewStructValue(huge)}}}}}})
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
	if len(pend) != DefaultPendingBound {
		t.Fatalf("%d requests pending, want %d", len(pend), DefaultPendingBound)
	}
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
	if p := thin.GetPendingPermissions(); len(p) != DefaultPendingBound || p[0].GetOptions()[0].GetOptionId() != "o0" {
		t.Errorf("the thin state's requests: %d", len(p))
	}
	after := &acpv2.SessionSnapshot{}
	st.Fill(after)
	if !proto.Equal(after, snap) {
		t.Error("Thin changed the state")
	}
}
