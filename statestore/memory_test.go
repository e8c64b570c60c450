package statestore_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(_ *testing.T, opts statestore.Options) statestore.Store { return statestore.NewMemory(opts) })
}

// The memory store keeps events in their wire form: each read gives
// events of their own, decoded from those bytes, unaffected by changes to
// the appended event's message or to an earlier read's.
func TestMemoryKeepsEventCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statestore.NewMemory(statestore.Options{})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	ev := storetest.Event(1, "hello")
	if err := s.Append(ctx, "a", storetest.Encode(t, ev), nil); err != nil {
		t.Fatal(err)
	}
	ev.GetAgentMessageChunk().GetContent().GetText().Text = "changed after append"
	first, err := s.Events(ctx, "a", 0, 0)
	if err != nil || len(first) != 1 {
		t.Fatalf("Events = %v, %v", first, err)
	}
	msg := storetest.Messages(t, first)[0]
	if msg == ev || msg.GetAgentMessageChunk().GetContent().GetText().GetText() != "hello" {
		t.Fatalf("stored event = %v, want the event as appended", msg)
	}
	msg.Seq = 99
	again, err := s.Events(ctx, "a", 0, 0)
	if err != nil || len(again) != 1 || !proto.Equal(storetest.Messages(t, again)[0], storetest.Event(1, "hello")) {
		t.Fatalf("Events after changing a copy = %v, %v", again, err)
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
