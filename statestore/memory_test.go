package statestore_test

import (
	"context"
	"testing"

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

// Over is the retention rule the stores share.
func TestOptionsOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  statestore.Options
		n     uint64
		bytes int64
		want  bool
	}{
		{statestore.Options{}, 1 << 40, 1 << 60, false},
		{statestore.Options{MaxEvents: 3}, 3, 1 << 60, false},
		{statestore.Options{MaxEvents: 3}, 4, 0, true},
		{statestore.Options{MaxEventBytes: 100}, 5, 100, false},
		{statestore.Options{MaxEventBytes: 100}, 5, 101, true},
		{statestore.Options{MaxEventBytes: 100}, 1, 1 << 40, false}, // the newest is kept
		{statestore.Options{MaxEvents: 10, MaxEventBytes: 100}, 2, 101, true},
		{statestore.Options{MaxEvents: 1, MaxEventBytes: 100}, 2, 1, true},
	} {
		if got := c.opts.Over(c.n, c.bytes); got != c.want {
			t.Errorf("%+v.Over(%d, %d) = %v, want %v", c.opts, c.n, c.bytes, got, c.want)
		}
	}
}
