package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// metricValue sums the samples of metric name, those labelled with
// status when it is given.
func metricValue(t *testing.T, met *metrics.Metrics, name, status string) float64 {
	t.Helper()
	var labels []string
	if status != "" {
		labels = append(labels, "status="+status)
	}
	return testutil.MetricSum(t, met.Registry(), name, labels...)
}

func toolUpdate(id, status string) *acpv2.SessionUpdate {
	u := &acpv2.ToolCallUpdate{ToolCallId: id}
	if status != "" {
		u.Status = &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: status}}
	}
	return &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: u}}
}

// The metrics count a session's tool calls by status and each call once
// when it finishes, timed from its first update; a session taken over from
// the store counts its calls by status, but not again those that finished
// before: the run that saw them finish counted them.
func TestToolCallMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := statestore.NewMemory(statestore.Options{})
	rec := &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", State: statestore.StateAgentLost, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	done := &acpv2.ToolCall{ToolCallId: "done", Status: "completed"}
	running := &acpv2.ToolCall{ToolCallId: "running", Status: "in_progress"}
	if err := st.Append(ctx, "s1", storetest.Encode(t, &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_ToolCall{ToolCall: done}}, &acpv2.SessionEvent{Seq: 2, Event: &acpv2.SessionEvent_ToolCall{ToolCall: running}}), storetest.Calls(t, done, running)); err != nil {
		t.Fatal(err)
	}
	met := metrics.New(metrics.Options{MaxSessionSeries: 10})
	m := NewManager(Options{Store: st, Metrics: met, IdleTimeout: -1})
	defer m.Close()
	s, err := m.Get(ctx, "", "s1")
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, finished, completed, inProgress, pending float64) {
		t.Helper()
		for _, c := range []struct {
			name, status string
			want         float64
		}{
			{"acp_gateway_tool_calls_total", "", finished},
			{"acp_gateway_tool_call_duration_seconds", "", finished},
			{"acp_gateway_session_tool_calls", "completed", completed},
			{"acp_gateway_session_tool_calls", "in_progress", inProgress},
			{"acp_gateway_session_tool_calls", "pending", pending},
		} {
			if got := metricValue(t, met, c.name, c.status); got != c.want {
				t.Errorf("%s: %s{%s} = %v, want %v", when, c.name, c.status, got, c.want)
			}
		}
	}
	check("restored", 0, 1, 1, 0)
	// Counted, the restored calls wait in wire form: each Snapshot
	// decodes them afresh.
	if a, b := s.Snapshot().GetToolCalls(), s.Snapshot().GetToolCalls(); len(a) != 2 || a[0] == b[0] {
		t.Errorf("the restored session's tool calls are not compacted: %v", a)
	}
	update(t, s, []agent.Update{{Update: toolUpdate("running", "completed")}})
	check("the restored call finished", 1, 2, 0, 0)
	update(t, s, []agent.Update{{Update: toolUpdate("new", "")}}) // pending, ACP's default
	check("a new call", 1, 2, 0, 1)
	update(t, s, []agent.Update{{Update: toolUpdate("new", "in_progress")}})
	update(t, s, []agent.Update{{Update: toolUpdate("new", "completed")}})
	check("the new call finished", 2, 3, 0, 0)
	update(t, s, []agent.Update{{Update: toolUpdate("new", "completed")}})
	check("the finished call updated again", 2, 3, 0, 0)
	update(t, s, []agent.Update{{Update: toolUpdate("at-once", "failed")}})
	check("a call finished with its first update", 3, 3, 0, 0)
	if got := metricValue(t, met, "acp_gateway_session_tool_calls", "failed"); got != 1 {
		t.Errorf("failed calls: %v, want 1", got)
	}
}

// encodedStore notes, for each merged tool-call event it is given, whether
// it came with its encoding.
type encodedStore struct {
	statestore.Store
	mu      sync.Mutex
	held    []bool // of the merged tool-call events
	others  []bool // of the other events
	appends int
	changed [][]*acpv2.ToolCall
	// within says, for each changed call, whether its bytes are within
	// those of an event of the same append: its merged event's, shared.
	within []bool
}

func (s *encodedStore) Append(ctx context.Context, id string, events []*encoded.Event, changed []statestore.Call) error {
	s.mu.Lock()
	s.appends++
	var calls []*acpv2.ToolCall
	for _, c := range changed {
		tc := &acpv2.ToolCall{}
		if err := proto.Unmarshal(c.Proto, tc); err != nil || tc.GetToolCallId() != c.ID {
			s.mu.Unlock()
			return fmt.Errorf("changed call %q encodes %v (%v)", c.ID, tc, err)
		}
		calls = append(calls, tc)
		s.within = append(s.within, slices.ContainsFunc(events, func(e *encoded.Event) bool { return contains(e.Proto(), c.Proto) }))
	}
	s.changed = append(s.changed, calls)
	for _, e := range events {
		ok := checkWire(e) == nil
		if e.Kind() == encoded.ToolCall {
			s.held = append(s.held, ok)
		} else {
			s.others = append(s.others, ok)
		}
	}
	s.mu.Unlock()
	return s.Store.Append(ctx, id, events, changed)
}

// contains says whether part lies within whole's memory.
func contains(whole, part []byte) bool {
	if len(part) == 0 || len(whole) == 0 {
		return false
	}
	w, p := uintptr(unsafe.Pointer(unsafe.SliceData(whole))), uintptr(unsafe.Pointer(unsafe.SliceData(part)))
	return p >= w && p+uintptr(len(part)) <= w+uintptr(len(whole))
}

// encodedSession returns a session (s1, restored from the store, with no
// agent) of a manager whose store is an encodedStore.
func encodedSession(t *testing.T) (*encodedStore, *Session) {
	t.Helper()
	st := &encodedStore{Store: statestore.NewMemory(statestore.Options{})}
	rec := &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", State: statestore.StateAgentLost, CreatedAt: time.Now()}
	if err := st.CreateSession(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{Store: st, IdleTimeout: -1})
	t.Cleanup(m.Close)
	s, err := m.Get(context.Background(), "", "s1")
	if err != nil {
		t.Fatal(err)
	}
	return st, s
}

// A merged tool call's event reaches the store with its encoding made
// already, from the parts the call shares with its version before, and
// that encoding is the event's.
func TestMergedCallEventsComeEncoded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, s := encodedSession(t)
	for _, status := range []string{"pending", "in_progress", "completed"} {
		update(t, s, []agent.Update{{Update: toolUpdate("c", status)}})
	}
	st.mu.Lock()
	held := st.held
	st.mu.Unlock()
	s.mu.Lock()
	marshalled := s.marshalled
	s.mu.Unlock()
	if marshalled != 0 {
		t.Fatalf("%d events marshalled whole, not from their bodies", marshalled)
	}
	if len(held) != 3 {
		t.Fatalf("%d merged tool-call events stored, want 3", len(held))
	}
	for i, h := range held {
		if !h {
			t.Fatalf("merged tool-call event %d reached the store without its encoding", i)
		}
	}
	events, err := decoded(t)(st.Events(ctx, "s1", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var last *acpv2.ToolCall
	for _, ev := range events {
		if tc := ev.GetToolCall(); tc != nil {
			last = tc
		}
	}
	if last.GetStatus() != "completed" || last.GetToolCallId() != "c" {
		t.Fatalf("the last stored merged call is %v", last)
	}
}

// The updates the agent's read loop hands over together are stored with
// one Append: their events in order (each encoded already), each merged
// event the call as that update left it, and each changed call once, as
// the last update left it.
func TestUpdatesTogetherAreOneAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, s := encodedSession(t)
	chunk := &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{}}}
	update(t, s, []agent.Update{
		{Update: toolUpdate("a", "pending")},
		{Update: toolUpdate("b", "pending")},
		{Update: chunk},
		{Update: toolUpdate("a", "in_progress")},
		{Update: toolUpdate("a", "completed")},
	})
	st.mu.Lock()
	appends, changed, held, within := st.appends, st.changed, append(st.held, st.others...), st.within
	st.mu.Unlock()
	s.mu.Lock()
	marshalled := s.marshalled
	s.mu.Unlock()
	if marshalled != 0 {
		t.Fatalf("%d events marshalled whole, not from their bodies", marshalled)
	}
	if appends != 1 {
		t.Fatalf("%d appends for one batch", appends)
	}
	if got := changed[0]; len(got) != 2 || got[0].GetToolCallId() != "a" || got[0].GetStatus() != "completed" || got[1].GetToolCallId() != "b" {
		t.Fatalf("changed calls %v, want a (completed) then b, once each", got)
	}
	for i, w := range within {
		if !w {
			t.Errorf("changed call %d is stored as bytes of its own, not its merged event's", i)
		}
	}
	for i, h := range held {
		if !h {
			t.Fatalf("event %d (merged ones first) reached the store without its encoding", i)
		}
	}
	events, err := decoded(t)(st.Events(ctx, "s1", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, ev := range events {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.GetSeq())
		}
		switch {
		case ev.GetToolCall() != nil:
			got = append(got, "call "+ev.GetToolCall().GetToolCallId()+" "+ev.GetToolCall().GetStatus())
		case ev.GetToolCallUpdate() != nil:
			got = append(got, "patch "+ev.GetToolCallUpdate().GetToolCallId())
		case ev.GetAgentMessageChunk() != nil:
			got = append(got, "chunk")
		}
	}
	want := []string{"patch a", "call a pending", "patch b", "call b pending", "chunk",
		"patch a", "call a in_progress", "patch a", "call a completed"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("events:\n %v\nwant\n %v", got, want)
	}
}

// A tool call that finishes during a turn is kept compacted from then on:
// each Snapshot decodes it afresh, where a call still running is handed
// out as the same message. A later update to the finished call still
// merges onto it.
func TestFinishedCallsAreCompactedDuringATurn(t *testing.T) {
	t.Parallel()
	_, s := encodedSession(t)
	update(t, s, []agent.Update{
		{Update: toolUpdate("done", "in_progress")}, {Update: toolUpdate("done", "completed")},
		{Update: toolUpdate("failed", "failed")},
		{Update: toolUpdate("running", "in_progress")},
	})
	s.mu.Lock()
	first, second := s.tools.Snapshot(), s.tools.Snapshot()
	s.mu.Unlock()
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("snapshots of %d and %d calls, want 3", len(first), len(second))
	}
	for i, want := range []struct {
		id, status string
		compacted  bool
	}{{"done", "completed", true}, {"failed", "failed", true}, {"running", "in_progress", false}} {
		if got := first[i]; got.GetToolCallId() != want.id || got.GetStatus() != want.status || (first[i] != second[i]) != want.compacted {
			t.Errorf("call %d: %s %s, compacted %v; want %s %s, compacted %v", i, got.GetToolCallId(), got.GetStatus(), first[i] != second[i], want.id, want.status, want.compacted)
		}
	}
	// An agent may still update a finished call.
	update(t, s, []agent.Update{{Update: &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{
		ToolCallId: "done", Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "again"}}}}}}})
	s.mu.Lock()
	got := s.tools.Get("done")
	s.mu.Unlock()
	if got.GetTitle() != "again" || got.GetStatus() != "completed" {
		t.Fatalf("the finished call after an update: %v", got)
	}
}
