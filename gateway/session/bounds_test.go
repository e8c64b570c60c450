package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// bigUpdate is a tool-call update of id with status and a rawOutput of
// size bytes.
func bigUpdate(id, status string, size int) agent.Update {
	u := toolUpdate(id, status)
	u.GetToolCallUpdate().RawOutput = &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: structpb.NewStringValue(strings.Repeat("o", size))}}
	return agent.Update{Update: u}
}

// kinds lists each stored event as its kind and tool call id, the unknown
// ones as "unknown <sessionUpdate> <toolCallId>".
func kinds(t *testing.T, st statestore.Store) []string {
	t.Helper()
	events, err := decoded(t)(st.Events(context.Background(), "s1", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		switch {
		case ev.GetUnknown() != nil:
			u := ev.GetUnknown()
			out = append(out, "unknown "+u.GetSessionUpdate()+" "+u.GetBody().GetFields()["toolCallId"].GetStringValue())
		case ev.GetToolCallUpdate() != nil:
			out = append(out, "update "+ev.GetToolCallUpdate().GetToolCallId())
		case ev.GetToolCallContentChunk() != nil:
			out = append(out, "chunk "+ev.GetToolCallContentChunk().GetToolCallId())
		case ev.GetToolCall() != nil:
			out = append(out, "call "+ev.GetToolCall().GetToolCallId())
		}
	}
	return out
}

// callIDs lists the ids of the session's merged calls.
func callIDs(s *Session) string {
	var ids []string
	for _, tc := range s.Snapshot().GetToolCalls() {
		ids = append(ids, tc.GetToolCallId())
	}
	return strings.Join(ids, " ")
}

// Past Options.MaxToolCalls, an update that would add a call is kept as an
// unknown update, as bad agent output is, and not merged; so is one whose
// id is too long or holds control characters. The calls the session has
// go on being updated. The first refusal is logged, and no other: an
// agent could make as many as it likes. (100,000 distinct calls from one
// agent took 473 MiB, and a snapshot none could send.)
func TestToolCallsPastTheCapAreRefused(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	st, s := storedSession(t, Options{MaxToolCalls: 3, Log: slog.New(slog.NewJSONHandler(&logs, nil))}, acpjson.V2)
	var ups []agent.Update
	for i := range 5 {
		ups = append(ups, agent.Update{Update: toolUpdate(fmt.Sprint("c", i), "completed")})
	}
	update(t, s, ups)
	update(t, s, []agent.Update{
		{Update: toolUpdate("c1", "failed")},
		{Update: toolUpdate(strings.Repeat("x", maxToolCallID+1), "")},
		{Update: toolUpdate("new\nline", "")},
	})
	if got := callIDs(s); got != "c0 c1 c2" {
		t.Fatalf("merged calls %q, want c0 c1 c2", got)
	}
	want := "update c0, call c0, update c1, call c1, update c2, call c2, unknown tool_call_update c3, unknown tool_call_update c4, " +
		"update c1, call c1, unknown tool_call_update " + strings.Repeat("x", maxToolCallID+1) + ", unknown tool_call_update new\nline"
	if got := strings.Join(kinds(t, st), ", "); got != want {
		t.Fatalf("events:\n %q\nwant\n %q", got, want)
	}
	if n := strings.Count(logs.String(), "tool-call update refused"); n != 1 {
		t.Fatalf("%d refusals logged, want the first only:\n%s", n, logs.String())
	}
	checkReadBack(t, st, s)
}

// Options.MaxToolCallBytes keeps a session's merged calls within one
// response: past it the oldest finished calls are trimmed, in the
// session and the store; an update that would pass it with every
// finished call trimmed is refused, and a running call is never trimmed.
func TestToolCallBytesAreBounded(t *testing.T) {
	t.Parallel()
	const budget = 16 << 10
	st, s := storedSession(t, Options{MaxToolCallBytes: budget}, acpjson.V2)
	check := func(when string) {
		t.Helper()
		s.mu.Lock()
		counted := s.tools.Bytes()
		s.mu.Unlock()
		snap := s.Snapshot()
		if got := proto.Size(&acpv2.SessionSnapshot{ToolCalls: snap.GetToolCalls()}); got > budget || got != counted {
			t.Fatalf("%s: the calls take %d bytes (counted %d), over %d", when, got, counted, budget)
		}
		stored, _, err := st.ToolCalls(context.Background(), "s1")
		if err != nil || len(stored) != len(snap.GetToolCalls()) {
			t.Fatalf("%s: stored calls %d (%v), snapshot %d", when, len(stored), err, len(snap.GetToolCalls()))
		}
		for i, tc := range stored {
			if !proto.Equal(tc, snap.GetToolCalls()[i]) {
				t.Fatalf("%s: stored call %d is %v, the session's %v", when, i, tc, snap.GetToolCalls()[i])
			}
		}
	}
	update(t, s, []agent.Update{bigUpdate("running", "in_progress", 2000)})
	for i := range 30 {
		update(t, s, []agent.Update{bigUpdate(fmt.Sprint("done", i), "completed", 1000)})
		check(fmt.Sprint("after call ", i))
	}
	snap := s.Snapshot().GetToolCalls()
	if len(snap) != 31 || merge.IsThin(snap[0]) || !merge.IsThin(snap[1]) || merge.IsThin(snap[30]) {
		t.Fatalf("calls after 30 finished ones: %d, running trimmed %v, oldest finished trimmed %v, newest %v",
			len(snap), merge.IsThin(snap[0]), merge.IsThin(snap[1]), merge.IsThin(snap[30]))
	}
	// The running call grows, a chunk at a time, until nothing is left
	// to trim: then its chunks are refused.
	chunk := &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{
		ToolCallId: "running", Content: &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{TerminalId: strings.Repeat("t", 1000)}}}}}}
	for range 20 {
		update(t, s, []agent.Update{{Update: chunk}})
		check("after a chunk")
	}
	got := kinds(t, st)
	if got[len(got)-1] != "unknown tool_call_content_chunk running" {
		t.Fatalf("the last chunk, past the bound, was stored as %q", got[len(got)-1])
	}
	if running := s.Snapshot().GetToolCalls()[0]; merge.IsThin(running) || len(running.GetContent()) < 10 {
		t.Fatalf("the running call: trimmed %v, %d chunks", merge.IsThin(running), len(running.GetContent()))
	}
	checkReadBack(t, st, s)
}

// A session at its caps, by default, holds a snapshot that fits in the
// default response (16 MiB) with room to spare: 10,000 calls as large as
// an agent likes are trimmed to what identifies them (a trimmed call is at
// most about 700 bytes, its id being at most 256), and running calls
// cannot pass the bytes cap.
func TestSnapshotAtTheDefaultCapsFits(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{}, acpjson.V2)
	long := strings.Repeat("\"\x01", 32<<10)
	for i := 0; i < DefaultMaxToolCalls+10; i += 100 {
		var ups []agent.Update
		for j := range 100 {
			id := fmt.Sprintf("%0256d", i+j) // the longest id
			up := bigUpdate(id, "completed", 4<<10)
			up.Update.GetToolCallUpdate().Title = &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: long}}
			ups = append(ups, up)
		}
		update(t, s, ups)
	}
	snap := s.Snapshot()
	if n := len(snap.GetToolCalls()); n != DefaultMaxToolCalls {
		t.Fatalf("%d calls, want %d", n, DefaultMaxToolCalls)
	}
	if size := proto.Size(&acpv2.GetSessionResponse{Session: snap}); size > DefaultMaxToolCallBytes+SnapshotHeadroom || size > 16<<20 {
		t.Fatalf("GetSession's response at the caps is %d bytes, over 16 MiB less the headroom", size)
	}
}

// Past Options.MaxPendingPermissions, the agent's request is answered with
// an error (30,000 pending requests took 84 MiB); answering one makes
// room. An answered request is kept, to tell a late answer so, only while
// it is among the last maxAnswered.
func TestPendingPermissionsAreCapped(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{MaxPendingPermissions: 2}, acpjson.V2)
	params := []byte(`{"toolCall":{"toolCallId":"c"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}`)
	ask := func() error {
		_, _, err := s.RequestPermission(params)
		return err
	}
	if err := errors.Join(ask(), ask()); err != nil {
		t.Fatal(err)
	}
	if err := ask(); err == nil || !strings.Contains(err.Error(), "waiting for an answer") {
		t.Fatalf("a third pending request: %v, want refused", err)
	}
	if err := s.RespondPermission("perm-1", "ok", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := ask(); err != nil {
		t.Fatalf("a request once one was answered: %v", err)
	}
	// Many answered requests: the oldest are forgotten.
	for range maxAnswered + 50 {
		s.mu.Lock()
		for id, p := range s.asks {
			if !p.resolved {
				s.resolveLocked(id, cancelled(), AnsweredByCancel)
			}
		}
		s.mu.Unlock()
		if err := ask(); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	kept, pending := len(s.asks), s.pending
	s.mu.Unlock()
	if kept > maxAnswered+2 || pending != 1 {
		t.Fatalf("%d requests kept, %d pending; want at most %d, 1", kept, pending, maxAnswered+2)
	}
	if err := s.RespondPermission("perm-1", "ok", false, ""); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("an answer to a long-forgotten request: %v, want ErrNoRequest", err)
	}
}

// Options.MaxStoreBytes bounds what the store keeps: past it the closed
// sessions are deleted, those closed first first, until it holds no
// more, but for the last one closed; a session that is not closed is
// never deleted. (One agent grew a bolt file by 165 MiB in 3.6 s, and
// its session kept that after it closed; a thousand such were kept.)
func TestStoreBytesDropTheOldestClosedSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := statestore.NewMemory(statestore.Options{})
	const each = 10 << 10 // bytes of events per session
	add := func(id string, state statestore.State) {
		t.Helper()
		if err := st.CreateSession(ctx, &statestore.Session{ID: id, Agent: "a", Cwd: "/", State: statestore.StateReady}); err != nil {
			t.Fatal(err)
		}
		ev := &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: strings.Repeat("x", each)}}}}}}
		if err := st.Append(ctx, id, storetest.Encode(t, ev), nil); err != nil {
			t.Fatal(err)
		}
		if err := st.SetState(ctx, id, state, ""); err != nil {
			t.Fatal(err)
		}
	}
	add("open", statestore.StateAgentLost)
	for i := range 5 {
		add(fmt.Sprint("closed", i), statestore.StateClosed)
	}
	m := NewManager(Options{Store: st, IdleTimeout: -1, MaxStoreBytes: 3*each + each/2})
	defer m.Close()
	remaining := func() string {
		recs, err := st.ListSessions(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return strings.Join(ids, " ")
	}
	m.pruneEnded(ctx)
	if got := remaining(); got != "open closed3 closed4" {
		t.Fatalf("kept %q, want the open session and the two closed last", got)
	}
	// The open session alone may pass the bound; the last closed stays.
	small := NewManager(Options{Store: st, IdleTimeout: -1, MaxStoreBytes: each / 2})
	defer small.Close()
	small.pruneEnded(ctx)
	if got := remaining(); got != "open closed4" {
		t.Fatalf("kept %q, want the open session and the last closed", got)
	}
}

// listCounter counts ListSessions calls, each of which reads every record.
type listCounter struct {
	statestore.Store
	lists atomic.Int64
}

func (c *listCounter) ListSessions(ctx context.Context, owner string) ([]*statestore.Session, error) {
	c.lists.Add(1)
	return c.Store.ListSessions(ctx, owner)
}

// Closing a session reads no other record while the store is within
// MaxStoreBytes: the cap on closed sessions is the store's own, applied by
// the SetState that closes, and a close adds nothing to the store's bytes.
// (It listed every session at every close: on Redis, 0.5 s per 20 closes
// over 1,000 closed sessions.) While the last check found the store over
// the bound, a close checks again, as it may let a session go.
func TestCloseReadsNoOtherRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &listCounter{Store: statestore.NewMemory(statestore.Options{MaxEndedSessions: 5})}
	for i := range 20 {
		id := fmt.Sprint("closed", i)
		if err := st.CreateSession(ctx, &statestore.Session{ID: id, Agent: "a", Cwd: "/", State: statestore.StateReady}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetState(ctx, id, statestore.StateClosed, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		id       string
		maxBytes int64
		lists    int64
	}{{"within", 1 << 30, 0}, {"over", 1, 1}} {
		if err := st.CreateSession(ctx, &statestore.Session{ID: c.id, Agent: "a", Cwd: "/", State: statestore.StateAgentLost}); err != nil {
			t.Fatal(err)
		}
		m := NewManager(Options{Store: st, IdleTimeout: -1, MaxStoreBytes: c.maxBytes})
		defer m.Close()
		s, err := m.Get(ctx, "", c.id)
		if err != nil {
			t.Fatal(err)
		}
		m.pruneEnded(ctx) // the last check, as the minute's upkeep makes it
		before := st.lists.Load()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n := st.lists.Load() - before; n != c.lists {
			t.Errorf("a close with the store %s MaxStoreBytes listed the sessions %d times, want %d", c.id, n, c.lists)
		}
		// The store's cap held; past MaxStoreBytes, only the last closed.
		want := "closed16 closed17 closed18 closed19 within"
		if c.id == "over" {
			want = "over"
		}
		if recs, err := st.Store.ListSessions(ctx, ""); err != nil || sessionIDs(recs) != want {
			t.Fatalf("sessions kept after closing %s: %q, %v; want %q", c.id, sessionIDs(recs), err, want)
		}
	}
}

func sessionIDs(recs []*statestore.Session) string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	return strings.Join(ids, " ")
}

// A permission request its agent withdrew ($/cancel_request) is resolved
// for every client, cancelled, by a permissionResolved that says so; an
// answer after it is refused. It stayed live until the turn ended, so that
// a user could approve what nobody waited for.
func TestWithdrawnPermissionIsResolvedForEveryClient(t *testing.T) {
	t.Parallel()
	st, s := storedSession(t, Options{}, acpjson.V2)
	params := []byte(`{"toolCall":{"toolCallId":"c"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}`)
	outcome, withdraw, err := s.RequestPermission(params)
	if err != nil {
		t.Fatal(err)
	}
	withdraw()
	if o := <-outcome; !o.GetCancelled() {
		t.Fatalf("the agent got %v, want cancelled", o)
	}
	if err := s.RespondPermission("perm-1", "ok", false, ""); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("an answer to a withdrawn request: %v, want ErrAlreadyAnswered", err)
	}
	withdraw() // once resolved, again: nothing
	stored(t, s)
	events, err := decoded(t)(st.Events(context.Background(), s.rec.ID, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var resolved []*acpv2.PermissionResolved
	for _, ev := range events {
		if r := ev.GetPermissionResolved(); r != nil {
			resolved = append(resolved, r)
		}
	}
	if len(resolved) != 1 || resolved[0].GetRequestId() != "perm-1" || !resolved[0].GetOutcome().GetCancelled() || resolved[0].GetAnsweredBy() != AnsweredByAgent {
		t.Fatalf("resolutions in the log = %v, want one, perm-1 cancelled, answered by the agent", resolved)
	}
}

// permissionResolved says who answered: the user, `user` without
// authentication, or `timeout`.
func TestPermissionResolvedSaysWhoAnswered(t *testing.T) {
	t.Parallel()
	st, s := storedSession(t, Options{PermissionTimeout: 50 * time.Millisecond}, acpjson.V2)
	params := []byte(`{"toolCall":{"toolCallId":"c"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}`)
	for _, user := range []string{"alice", ""} {
		if _, _, err := s.RequestPermission(params); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		id := fmt.Sprintf("perm-%d", s.seq)
		s.mu.Unlock()
		if err := s.RespondPermission(id, "ok", false, user); err != nil {
			t.Fatal(err)
		}
	}
	outcome, _, err := s.RequestPermission(params)
	if err != nil {
		t.Fatal(err)
	}
	<-outcome // timed out
	stored(t, s)
	events, err := decoded(t)(st.Events(context.Background(), s.rec.ID, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var by []string
	for _, ev := range events {
		if r := ev.GetPermissionResolved(); r != nil {
			by = append(by, r.GetAnsweredBy())
		}
	}
	if want := []string{"user:alice", AnsweredByUser, AnsweredByTimeout}; !slices.Equal(by, want) {
		t.Fatalf("answered by %q, want %q", by, want)
	}
}
