// Package storetest is the contract test suite every statestore.Store must
// pass. Each store's tests call Run with a constructor for a fresh store.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Run runs the contract suite. newStore returns an empty store; it is
// called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) statestore.Store) {
	t.Run("CreateGetList", func(t *testing.T) { testCreateGetList(t, newStore(t)) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, newStore(t)) })
	t.Run("StateAndAgentSession", func(t *testing.T) { testState(t, newStore(t)) })
	t.Run("AppendAndReplay", func(t *testing.T) { testAppend(t, newStore(t)) })
	t.Run("SeqConflict", func(t *testing.T) { testSeqConflict(t, newStore(t)) })
	t.Run("ToolCallOrder", func(t *testing.T) { testToolCalls(t, newStore(t)) })
	t.Run("ConcurrentSessions", func(t *testing.T) { testConcurrent(t, newStore(t)) })
}

func session(id, owner string) *statestore.Session {
	return &statestore.Session{
		ID: id, Owner: owner, Agent: "demo", Cwd: "/w", State: statestore.StateStarting,
		CreatedAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
	}
}

// Event returns a text-chunk event with the given seq.
func Event(seq uint64, text string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_AgentMessageChunk{
		AgentMessageChunk: &acpv2.ContentChunk{Content: &acpv2.ContentBlock{
			Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: text}}}}}}
}

func testCreateGetList(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	for _, sess := range []*statestore.Session{session("a", "alice"), session("b", "bob"), session("c", "alice")} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSession(ctx, session("a", "alice")); !errors.Is(err, statestore.ErrExists) {
		t.Fatalf("duplicate create: err = %v, want ErrExists", err)
	}
	got, err := s.GetSession(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if want := session("b", "bob"); got.ID != want.ID || got.Owner != want.Owner || got.Agent != want.Agent ||
		got.Cwd != want.Cwd || got.State != want.State || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("GetSession = %+v, want %+v", got, want)
	}
	list, err := s.ListSessions(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "a" || list[1].ID != "c" {
		t.Fatalf("ListSessions(alice) = %v", ids(list))
	}
	all, err := s.ListSessions(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("ListSessions() = %v", ids(all))
	}
}

func ids(l []*statestore.Session) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.ID)
	}
	return out
}

func testNotFound(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	checks := map[string]error{}
	_, checks["GetSession"] = s.GetSession(ctx, "nope")
	checks["SetState"] = s.SetState(ctx, "nope", statestore.StateReady, "")
	checks["SetAgentSession"] = s.SetAgentSession(ctx, "nope", "x", 1)
	checks["Append"] = s.Append(ctx, "nope", []*acpv2.SessionEvent{Event(1, "x")}, nil)
	_, checks["Events"] = s.Events(ctx, "nope", 0, 0)
	_, checks["ToolCalls"] = s.ToolCalls(ctx, "nope")
	for op, err := range checks {
		if !errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("%s on a missing session: err = %v, want ErrNotFound", op, err)
		}
	}
}

func testState(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "a", statestore.StateAgentLost, "agent exited with status 3"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAgentSession(ctx, "a", "sess_123", 1); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != statestore.StateAgentLost || got.Detail != "agent exited with status 3" ||
		got.AgentSessionID != "sess_123" || got.ProtocolVersion != 1 {
		t.Fatalf("GetSession = %+v", got)
	}
}

func testAppend(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	var all []*acpv2.SessionEvent
	for seq := uint64(1); seq <= 25; {
		batch := []*acpv2.SessionEvent{}
		for n := 0; n < int(seq%4)+1 && seq <= 25; n++ {
			batch = append(batch, Event(seq, fmt.Sprint("chunk ", seq)))
			seq++
		}
		if err := s.Append(ctx, "a", batch, nil); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	rec, err := s.GetSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if rec.LastSeq != 25 {
		t.Fatalf("LastSeq = %d, want 25", rec.LastSeq)
	}
	for _, after := range []uint64{0, 1, 7, 24, 25, 30} {
		got, err := s.Events(ctx, "a", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []*acpv2.SessionEvent
		if after < 25 {
			want = all[after:]
		}
		if !slices.EqualFunc(got, want, eventEqual) {
			t.Fatalf("Events(after %d) = %d events, want %d", after, len(got), len(want))
		}
	}
	got, err := s.Events(ctx, "a", 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, all[3:8], eventEqual) {
		t.Fatalf("Events(after 3, limit 5) = %v", got)
	}
}

func testSeqConflict(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "a", []*acpv2.SessionEvent{Event(1, "x"), Event(2, "y")}, nil); err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]*acpv2.SessionEvent{
		"reused seq":      {Event(2, "again")},
		"gap":             {Event(4, "skip")},
		"gap inside":      {Event(3, "ok"), Event(5, "skip")},
		"zero":            {Event(0, "zero")},
		"second writer 1": {Event(1, "fork")},
	} {
		if err := s.Append(ctx, "a", batch, nil); !errors.Is(err, statestore.ErrSeqConflict) {
			t.Errorf("%s: err = %v, want ErrSeqConflict", name, err)
		}
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("a refused append changed the log: %d events", len(got))
	}
}

func testToolCalls(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	tc := func(id, status string) *acpv2.ToolCall {
		return &acpv2.ToolCall{ToolCallId: id, Title: "t " + id, Status: status}
	}
	steps := [][]*acpv2.ToolCall{
		{tc("z", "pending")},
		{tc("a", "pending"), tc("z", "in_progress")},
		{tc("m", "pending")},
		{tc("a", "completed")},
	}
	for i, changed := range steps {
		if err := s.Append(ctx, "a", []*acpv2.SessionEvent{Event(uint64(i+1), "e")}, changed); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ToolCalls(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := []*acpv2.ToolCall{tc("z", "in_progress"), tc("a", "completed"), tc("m", "pending")}
	if len(got) != len(want) {
		t.Fatalf("ToolCalls = %v", got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("ToolCalls[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func testConcurrent(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	const sessions, events = 8, 50
	var wg sync.WaitGroup
	for i := 0; i < sessions; i++ {
		id := fmt.Sprint("s", i)
		if err := s.CreateSession(ctx, session(id, "")); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= events; seq++ {
				if err := s.Append(ctx, id, []*acpv2.SessionEvent{Event(seq, id)}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; i < sessions; i++ {
		got, err := s.Events(ctx, fmt.Sprint("s", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != events {
			t.Fatalf("session %d has %d events, want %d", i, len(got), events)
		}
	}
}

func eventEqual(a, b *acpv2.SessionEvent) bool { return proto.Equal(a, b) }
