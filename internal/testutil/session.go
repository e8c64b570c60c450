package testutil

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// Turn sends req and reads its stream to its end, calling onEvent (when
// set) with each event as it arrives; onEvent may call the gateway. It
// returns the turn's events, heartbeats left out, and an error unless the
// stream ends cleanly with turn_ended last.
func Turn(ctx context.Context, c acpv2connect.SessionServiceClient, req *acpv2.PromptRequest, onEvent func(*acpv2.SessionEvent)) ([]*acpv2.SessionEvent, error) {
	stream, err := c.Prompt(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fmt.Errorf("prompt: %w", err)
	}
	defer stream.Close()
	var events []*acpv2.SessionEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue // a heartbeat
		}
		events = append(events, ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	if err := stream.Err(); err != nil {
		return events, fmt.Errorf("prompt stream after %d events: %w", len(events), err)
	}
	if len(events) == 0 || events[len(events)-1].GetTurnEnded() == nil {
		return events, fmt.Errorf("the turn's stream did not end with turn_ended: %v", events)
	}
	return events, nil
}

// Watch reads the first n events of session id after afterSeq with a
// Watch stream, heartbeats left out, then ends the stream. It is an error
// when the stream ends before n events.
func Watch(ctx context.Context, c acpv2connect.SessionServiceClient, id string, afterSeq uint64, n int) ([]*acpv2.SessionEvent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: afterSeq}))
	if err != nil {
		return nil, fmt.Errorf("Watch: %w", err)
	}
	// A watch never ends by itself: cancel it before Close.
	defer func() {
		cancel()
		stream.Close()
	}()
	var events []*acpv2.SessionEvent
	for len(events) < n && stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			events = append(events, ev)
		}
	}
	if len(events) < n {
		return events, fmt.Errorf("Watch(after %d): %d of %d events, then %v", afterSeq, len(events), n, stream.Err())
	}
	return events, nil
}

// CheckSeqs fails the test unless the events are numbered first, first+1,
// and so on: seqs are contiguous.
func CheckSeqs(t testing.TB, events []*acpv2.SessionEvent, first uint64) {
	t.Helper()
	for i, ev := range events {
		if want := first + uint64(i); ev.GetSeq() != want {
			t.Fatalf("event %d has seq %d, want %d (seqs are contiguous)", i, ev.GetSeq(), want)
		}
	}
}

// ApplyDelta applies ev to state when ev is a delta (a tool_call_update
// or a tool_call_content_chunk) and returns the merged call; for any
// other event it returns nil.
func ApplyDelta(state *merge.State, ev *acpv2.SessionEvent) (*acpv2.ToolCall, error) {
	switch {
	case ev.GetToolCallUpdate() != nil:
		return state.ApplyUpdate(ev.GetToolCallUpdate())
	case ev.GetToolCallContentChunk() != nil:
		return state.ApplyChunk(ev.GetToolCallContentChunk())
	}
	return nil, nil
}

// CheckReplay replays the events' tool-call deltas onto an empty merge
// state and fails the test unless: each delta is followed at once by its
// merged tool_call event, equal to the replay's; every permission
// request's preview is the replayed call with the request's patch applied
// (the request itself stores nothing); and snapshot, the session's tool
// calls, is the replay's end state.
func CheckReplay(t testing.TB, events []*acpv2.SessionEvent, snapshot []*acpv2.ToolCall) {
	t.Helper()
	state := merge.New()
	var want *acpv2.ToolCall // the merged call the next event must be
	for i, ev := range events {
		if ev.GetToolCall() != nil {
			if want == nil || !proto.Equal(ev.GetToolCall(), want) {
				t.Fatalf("event %d (seq %d): merged tool call %v, the replay gives %v", i, ev.GetSeq(), ev.GetToolCall(), want)
			}
			want = nil
			continue
		}
		if want != nil {
			t.Fatalf("event %d (seq %d): the delta before it was not followed by its merged tool_call", i, ev.GetSeq())
		}
		var err error
		if want, err = ApplyDelta(state, ev); err != nil {
			t.Fatalf("event %d (seq %d): %v", i, ev.GetSeq(), err)
		}
		if p := ev.GetPermissionRequest(); p.GetToolCall() != nil {
			preview, err := state.Preview(p.GetToolCall())
			if err != nil || !proto.Equal(p.GetPreview(), preview) {
				t.Fatalf("event %d (seq %d): permission preview %v, want %v (%v)", i, ev.GetSeq(), p.GetPreview(), preview, err)
			}
		}
	}
	if want != nil {
		t.Fatal("the last delta was not followed by its merged tool_call")
	}
	got := state.Snapshot()
	if len(got) != len(snapshot) {
		t.Fatalf("the session has %d tool calls, the replay %d:\n%v\n%v", len(snapshot), len(got), snapshot, got)
	}
	for i := range got {
		if !proto.Equal(got[i], snapshot[i]) {
			t.Fatalf("the session's tool call %d = %v, the replay gives %v", i, snapshot[i], got[i])
		}
	}
}
