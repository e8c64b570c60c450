package sessionstate

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

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
