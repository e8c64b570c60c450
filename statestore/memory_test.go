package statestore_test

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(_ *testing.T, opts statestore.Options) statestore.Store { return statestore.NewMemory(opts) })
}

// The memory store keeps events in their wire form: what it returns is a
// copy, unaffected by changes to the appended event or to an earlier copy.
func TestMemoryKeepsEventCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statestore.NewMemory(statestore.Options{})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	ev := storetest.Event(1, "hello")
	if err := s.Append(ctx, "a", []*acpv2.SessionEvent{ev}, nil, nil); err != nil {
		t.Fatal(err)
	}
	ev.GetAgentMessageChunk().GetContent().GetText().Text = "changed after append"
	first, err := s.Events(ctx, "a", 0, 0)
	if err != nil || len(first) != 1 {
		t.Fatalf("Events = %v, %v", first, err)
	}
	if first[0] == ev || first[0].GetAgentMessageChunk().GetContent().GetText().GetText() != "hello" {
		t.Fatalf("stored event = %v, want the event as appended", first[0])
	}
	first[0].Seq = 99
	again, err := s.Events(ctx, "a", 0, 0)
	if err != nil || len(again) != 1 || !proto.Equal(again[0], storetest.Event(1, "hello")) {
		t.Fatalf("Events after changing a copy = %v, %v", again, err)
	}
}

// An Append whose events cannot be encoded stores none of them.
func TestMemoryAppendIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statestore.NewMemory(statestore.Options{})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	bad := []*acpv2.SessionEvent{storetest.Event(1, "fine"), storetest.Event(2, "not UTF-8: \xff")}
	if err := s.Append(ctx, "a", bad, nil, []*acpv2.ToolCall{{ToolCallId: "c"}}); err == nil {
		t.Fatal("Append of an event that cannot be encoded succeeded")
	}
	if rec, err := s.GetSession(ctx, "a"); err != nil || rec.LastSeq != 0 {
		t.Fatalf("after a failed Append: GetSession = %+v, %v; want LastSeq 0", rec, err)
	}
	if calls, _, err := s.ToolCalls(ctx, "a"); err != nil || len(calls) != 0 {
		t.Fatalf("after a failed Append: ToolCalls = %v, %v; want none", calls, err)
	}
	if err := s.Append(ctx, "a", []*acpv2.SessionEvent{storetest.Event(1, "fine")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Events(ctx, "a", 0, 0); err != nil || len(got) != 1 || got[0].GetSeq() != 1 {
		t.Fatalf("Events = %v, %v; want the one good event", got, err)
	}
}

// A changed tool call is kept as the bytes of its merged event in the same
// Append, without marshalling it again: given an encoding whose call holds
// a field the message lacks, ToolCalls has that field. A call with no event
// of its own is marshalled. Either way ToolCalls hands out messages of its
// own, which later changes to the appended ones do not reach.
func TestMemoryKeepsToolCallsAsTheirEventsBytes(t *testing.T) {
	ctx := context.Background()
	m := statestore.NewMemory(statestore.Options{})
	if err := m.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	merged := &acpv2.ToolCall{ToolCallId: "c1", Title: "read", Status: "completed"}
	other := &acpv2.ToolCall{ToolCallId: "c2", Title: "edit"}
	ev := &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_ToolCall{ToolCall: merged}}
	call, err := proto.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	extra := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)
	call = append(call, extra...)
	field := (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Fields().ByName("tool_call").Number()
	wire := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // seq
	wire = protowire.AppendBytes(protowire.AppendTag(wire, field, protowire.BytesType), call)
	if err := m.Append(ctx, "a", []*acpv2.SessionEvent{ev}, [][]byte{wire}, []*acpv2.ToolCall{merged, other}); err != nil {
		t.Fatal(err)
	}
	merged.Title, other.Title = "changed", "changed"
	got, asOf, err := m.ToolCalls(ctx, "a")
	if err != nil || asOf != 1 || len(got) != 2 {
		t.Fatalf("ToolCalls = %v as of %d, %v", got, asOf, err)
	}
	if got[0].GetTitle() != "read" || !bytes.Equal(got[0].ProtoReflect().GetUnknown(), extra) {
		t.Errorf("the merged call is %v, unknown fields %x: not its event's bytes", got[0], got[0].ProtoReflect().GetUnknown())
	}
	if got[1].GetTitle() != "edit" || len(got[1].ProtoReflect().GetUnknown()) != 0 {
		t.Errorf("the call without an event is %v", got[1])
	}
}
