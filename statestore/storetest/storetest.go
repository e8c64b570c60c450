// Package storetest is the contract test suite every statestore.Store must
// pass. Each store's tests call Run with a constructor for a fresh store.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Opener returns a new, empty store with opts. The store is closed by the
// test (through t.Cleanup) or by the suite.
type Opener func(t *testing.T, opts statestore.Options) statestore.Store

// Run runs the contract suite every store must pass. open is called once
// per subtest.
func Run(t *testing.T, open Opener) {
	plain := func(t *testing.T) statestore.Store { return open(t, statestore.Options{}) }
	t.Run("CreateGetList", func(t *testing.T) { testCreateGetList(t, plain(t)) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, plain(t)) })
	t.Run("StateAndAgentSession", func(t *testing.T) { testState(t, plain(t)) })
	t.Run("MCPServersKept", func(t *testing.T) { testMCPServers(t, plain(t)) })
	t.Run("AppendAndReplay", func(t *testing.T) { testAppend(t, plain(t)) })
	t.Run("AppendKeepsEncodings", func(t *testing.T) { testAppendEncoded(t, plain(t)) })
	t.Run("SeqConflict", func(t *testing.T) { testSeqConflict(t, plain(t)) })
	t.Run("ToolCallOrder", func(t *testing.T) { testToolCalls(t, plain(t)) })
	t.Run("ToolCallByID", func(t *testing.T) { testToolCall(t, plain(t)) })
	t.Run("ToolCallsFromTheirEvents", func(t *testing.T) { testCallsFromTheirEvents(t, plain(t)) })
	t.Run("ConcurrentSessions", func(t *testing.T) { testConcurrent(t, plain(t)) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, open(t, statestore.Options{MaxEvents: 10})) })
	t.Run("RetentionByBytes", func(t *testing.T) {
		testRetentionBytes(t, open(t, statestore.Options{MaxEventBytes: 10*SizedEventBytes + SizedEventBytes/2}))
	})
	// The count trims first, and the bytes it let go are not counted.
	t.Run("RetentionByBytesAndCount", func(t *testing.T) {
		testRetentionBytes(t, open(t, statestore.Options{MaxEvents: 12, MaxEventBytes: 10*SizedEventBytes + SizedEventBytes/2}))
	})
	t.Run("WaitEvents", func(t *testing.T) { testWaitEvents(t, plain(t), nil) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, plain(t)) })
	t.Run("DeepestEventsReadBack", func(t *testing.T) { testDeepestEvents(t, plain(t)) })
	t.Run("Bytes", func(t *testing.T) { testBytes(t, open(t, statestore.Options{MaxEvents: 5})) })
	ended := statestore.Options{MaxEndedSessions: endedCap}
	t.Run("EndedSessionsCapped", func(t *testing.T) { testEndedCap(t, open(t, ended)) })
	t.Run("EndedSessionsCappedConcurrently", func(t *testing.T) {
		s := open(t, ended)
		testEndedCapConcurrent(t, s, s)
	})
}

// RunDurable checks that what a store holds survives a restart. reopen
// closes s and returns a store opened on the same data, with the same
// options.
func RunDurable(t *testing.T, open Opener, reopen func(t *testing.T, s statestore.Store) statestore.Store) {
	t.Run("SurvivesRestart", func(t *testing.T) { testRestart(t, open(t, statestore.Options{MaxEvents: 20}), reopen) })
	t.Run("MCPServersSurviveRestart", func(t *testing.T) { testMCPServersRestart(t, open(t, statestore.Options{}), reopen) })
	t.Run("EndedSessionsCappedAfterRestart", func(t *testing.T) {
		testEndedCapRestart(t, open(t, statestore.Options{MaxEndedSessions: endedCap}), reopen)
	})
}

// RunShared checks a store that several replicas open at once. second
// returns another store open on s's data at the same time, with the same
// options, as a second replica would hold.
func RunShared(t *testing.T, open Opener, second func(t *testing.T, s statestore.Store) statestore.Store) {
	t.Run("SharedLog", func(t *testing.T) {
		a := open(t, statestore.Options{})
		testShared(t, a, second(t, a))
	})
	t.Run("WaitAcrossReplicas", func(t *testing.T) {
		a := open(t, statestore.Options{})
		testWaitEvents(t, a, second(t, a))
	})
	t.Run("Leases", func(t *testing.T) {
		a := open(t, statestore.Options{})
		testLeases(t, a, second(t, a))
	})
	t.Run("EndedSessionsCappedAcrossReplicas", func(t *testing.T) {
		a := open(t, statestore.Options{MaxEndedSessions: endedCap})
		testEndedCapConcurrent(t, a, second(t, a))
	})
}

func session(id, owner string) *statestore.Session {
	return &statestore.Session{
		ID: id, Owner: owner, Agent: "demo", Cwd: "/w", State: statestore.StateStarting,
		CreatedAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
	}
}

// Encode returns events as Append takes them, encoded by proto.Marshal.
func Encode(t testing.TB, events ...*acpv2.SessionEvent) []*encoded.Event {
	t.Helper()
	out := make([]*encoded.Event, len(events))
	for i, ev := range events {
		var err error
		if out[i], err = encoded.New(ev); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Calls returns tool calls as Append takes them, encoded by proto.Marshal.
func Calls(t testing.TB, calls ...*acpv2.ToolCall) []statestore.Call {
	t.Helper()
	out := make([]statestore.Call, len(calls))
	for i, tc := range calls {
		var err error
		if out[i], err = statestore.CallOf(tc); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Messages returns the messages of events, as Events gave them, failing
// the test when one does not decode.
func Messages(t testing.TB, events []*encoded.Event) []*acpv2.SessionEvent {
	t.Helper()
	out := make([]*acpv2.SessionEvent, len(events))
	for i, e := range events {
		var err error
		if out[i], err = e.Message(); err != nil {
			t.Fatal(err)
		}
	}
	return out
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
	checks["Append"] = s.Append(ctx, "nope", Encode(t, Event(1, "x")), nil)
	_, checks["Events"] = s.Events(ctx, "nope", 0, 0)
	_, _, checks["ToolCalls"] = s.ToolCalls(ctx, "nope")
	_, _, checks["ToolCall"] = s.ToolCall(ctx, "nope", "c")
	checks["DeleteSession"] = s.DeleteSession(ctx, "nope")
	checks["WaitEvents"] = s.WaitEvents(ctx, "nope", 0)
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
	before := time.Now().Add(-time.Millisecond)
	if err := s.SetState(ctx, "a", statestore.StateAgentLost, "agent exited with status 3"); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Millisecond)
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
	if got.StateChangedAt.Before(before) || got.StateChangedAt.After(after) {
		t.Fatalf("StateChangedAt %v, want between %v and %v", got.StateChangedAt, before, after)
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
		if err := s.Append(ctx, "a", Encode(t, batch...), nil); err != nil {
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
		// The events come with their encodings and their seqs, read from
		// those bytes, so streams that send them need not decode them.
		for i, ev := range got {
			if ev.Seq() != want[i].GetSeq() {
				t.Fatalf("Events(after %d): event %d has seq %d", after, want[i].GetSeq(), ev.Seq())
			}
			back := &acpv2.SessionEvent{}
			if err := proto.Unmarshal(ev.Proto(), back); err != nil || !proto.Equal(back, want[i]) {
				t.Fatalf("event %d's encoding decodes to %v (%v)", ev.Seq(), back, err)
			}
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

// An event is stored as its bytes, not marshalled again: the encoding
// here carries a field the event's message does not, which the stored
// event then has.
func testAppendEncoded(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	given := Event(2, "given")
	wire, err := proto.Marshal(given)
	if err != nil {
		t.Fatal(err)
	}
	extra := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)
	wire = append(wire, extra...)
	events := []*encoded.Event{Encode(t, Event(1, "marshalled"))[0], encoded.Of(given, wire)}
	if err := s.Append(ctx, "a", events, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0].Proto(), events[0].Proto()) {
		t.Fatalf("stored %v, want %v first", got, events[0])
	}
	if !bytes.Equal(got[1].Proto(), wire) {
		t.Fatalf("the second event was not stored as its encoding: %x, want %x", got[1].Proto(), wire)
	}
	msg, err := got[1].Message()
	if err != nil || !bytes.Equal(msg.ProtoReflect().GetUnknown(), extra) {
		t.Fatalf("the second event decodes to %v (%v), without the field only its encoding has", msg, err)
	}
}

func testSeqConflict(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "a", Encode(t, Event(1, "x"), Event(2, "y")), nil); err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]*acpv2.SessionEvent{
		"reused seq":      {Event(2, "again")},
		"gap":             {Event(4, "skip")},
		"gap inside":      {Event(3, "ok"), Event(5, "skip")},
		"zero":            {Event(0, "zero")},
		"second writer 1": {Event(1, "fork")},
	} {
		if err := s.Append(ctx, "a", Encode(t, batch...), nil); !errors.Is(err, statestore.ErrSeqConflict) {
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
		if err := s.Append(ctx, "a", Encode(t, Event(uint64(i+1), "e")), Calls(t, changed...)); err != nil {
			t.Fatal(err)
		}
	}
	got, asOf, err := s.ToolCalls(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if asOf != uint64(len(steps)) {
		t.Fatalf("ToolCalls as of seq %d, want %d", asOf, len(steps))
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

// ToolCall reads one call by its id, as ToolCalls has it, with the seq of
// the last event; a call the session does not have is nil, not an error.
// A call carrying a field ToolCall does not declare (as the session's
// state record does) keeps it.
func testToolCall(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	if tc, asOf, err := s.ToolCall(ctx, "a", "z"); err != nil || tc != nil || asOf != 0 {
		t.Fatalf("ToolCall of a new session = %v, %d, %v; want nil, 0, nil", tc, asOf, err)
	}
	record := protowire.AppendTag(nil, 1, protowire.BytesType)
	record = protowire.AppendString(record, "rec")
	record = protowire.AppendTag(record, 1000, protowire.BytesType)
	record = protowire.AppendBytes(record, []byte("state"))
	steps := [][]statestore.Call{
		Calls(t, &acpv2.ToolCall{ToolCallId: "z", Status: "pending"}),
		append(Calls(t, &acpv2.ToolCall{ToolCallId: "a", Status: "pending"}), statestore.Call{ID: "rec", Proto: record}),
		Calls(t, &acpv2.ToolCall{ToolCallId: "z", Status: "completed"}),
	}
	for i, changed := range steps {
		if err := s.Append(ctx, "a", Encode(t, Event(uint64(i+1), "e")), changed); err != nil {
			t.Fatal(err)
		}
	}
	// Calls without events leave the seq as it was.
	if err := s.Append(ctx, "a", nil, Calls(t, &acpv2.ToolCall{ToolCallId: "a", Status: "failed"})); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]*acpv2.ToolCall{
		"z": {ToolCallId: "z", Status: "completed"},
		"a": {ToolCallId: "a", Status: "failed"},
		"m": nil,
	} {
		tc, asOf, err := s.ToolCall(ctx, "a", id)
		if err != nil || asOf != uint64(len(steps)) {
			t.Fatalf("ToolCall(%s) as of %d, %v; want %d", id, asOf, err, len(steps))
		}
		if want == nil && tc != nil || want != nil && !proto.Equal(tc, want) {
			t.Fatalf("ToolCall(%s) = %v, want %v", id, tc, want)
		}
	}
	tc, _, err := s.ToolCall(ctx, "a", "rec")
	if err != nil || tc.GetToolCallId() != "rec" || !bytes.Equal(tc.ProtoReflect().GetUnknown(), record[5:]) {
		t.Fatalf("ToolCall(rec) = %v, %v; want its unknown field kept", tc, err)
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
				if err := s.Append(ctx, id, Encode(t, Event(seq, id)), nil); err != nil {
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

// Await returns the error done delivers, and fails the test with failure
// when none comes within d.
func Await(t testing.TB, done <-chan error, d time.Duration, failure string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s (waited %v)", failure, d)
		return nil
	}
}

// eventEqual says a stored event decodes to the message appended.
func eventEqual(a *encoded.Event, b *acpv2.SessionEvent) bool {
	msg, err := a.Message()
	return err == nil && proto.Equal(msg, b)
}

// sameEvent says two stored events are the same bytes.
func sameEvent(a, b *encoded.Event) bool { return bytes.Equal(a.Proto(), b.Proto()) }

func appendN(t *testing.T, s statestore.Store, id string, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		changed := []*acpv2.ToolCall{{ToolCallId: fmt.Sprint("call", seq%3), Title: fmt.Sprint("seq ", seq)}}
		if err := s.Append(context.Background(), id, Encode(t, Event(seq, fmt.Sprint("e", seq))), Calls(t, changed...)); err != nil {
			t.Fatalf("append seq %d: %v", seq, err)
		}
	}
}

func testRetention(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "a", 1, 25)
	CheckKept(t, s, "a", 15, 25, "25 events")
	// Trimming events never trims tool calls.
	calls, asOf, err := s.ToolCalls(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || asOf != 25 || calls[0].GetTitle() != "seq 25" {
		t.Fatalf("ToolCalls = %v as of %d", calls, asOf)
	}
}

// SizedEvent is an event whose encoding is SizedEventBytes long, for seqs
// below 128.
func SizedEvent(seq uint64) *acpv2.SessionEvent { return Event(seq, strings.Repeat("x", 100)) }

// SizedEventBytes is the length of a SizedEvent's encoding.
var SizedEventBytes = int64(proto.Size(SizedEvent(1)))

// testRetentionBytes checks a store whose sessions keep at most ten and a
// half sizedEvents' bytes: the oldest events go first, whatever the
// batches; an event larger than the cap alone is kept, being the newest,
// until another follows it.
func testRetentionBytes(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 25; {
		var batch []*acpv2.SessionEvent
		for n := 0; n < int(seq%3)+1 && seq <= 25; n++ {
			batch = append(batch, SizedEvent(seq))
			seq++
		}
		if err := s.Append(ctx, "a", Encode(t, batch...), nil); err != nil {
			t.Fatal(err)
		}
	}
	CheckKept(t, s, "a", 15, 25, "25 events")
	big := Event(26, strings.Repeat("y", int(20*SizedEventBytes)))
	if err := s.Append(ctx, "a", Encode(t, big), nil); err != nil {
		t.Fatal(err)
	}
	CheckKept(t, s, "a", 25, 26, "an event over the cap")
	if err := s.Append(ctx, "a", Encode(t, SizedEvent(27)), nil); err != nil {
		t.Fatal(err)
	}
	CheckKept(t, s, "a", 26, 27, "an event after it")
}

// AppendSized appends SizedEvents with seqs from to to to session id, one
// per Append.
func AppendSized(t testing.TB, s statestore.Store, id string, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if err := s.Append(context.Background(), id, Encode(t, SizedEvent(seq)), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// CheckKept fails the test (saying what was checked) unless session id's
// record and Events agree that it keeps the events with seqs trimmed+1
// to last, and those before are trimmed.
func CheckKept(t testing.TB, s statestore.Store, id string, trimmed, last uint64, what string) {
	t.Helper()
	ctx := context.Background()
	rec, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.LastSeq != last || rec.TrimmedSeq != trimmed {
		t.Fatalf("%s: LastSeq %d TrimmedSeq %d, want %d and %d", what, rec.LastSeq, rec.TrimmedSeq, last, trimmed)
	}
	if _, err := s.Events(ctx, id, trimmed-1, 0); trimmed > 0 && !errors.Is(err, statestore.ErrTrimmed) {
		t.Fatalf("%s: Events(after %d) err = %v, want ErrTrimmed", what, trimmed-1, err)
	}
	got, err := s.Events(ctx, id, trimmed, 0)
	if err != nil || uint64(len(got)) != last-trimmed || len(got) > 0 && got[0].Seq() != trimmed+1 {
		t.Fatalf("%s: Events(after %d) = %d events (%v), want seqs %d to %d", what, trimmed, len(got), err, trimmed+1, last)
	}
}

// testWaitEvents checks that WaitEvents on w wakes for appends to s (w is s
// when nil).
func testWaitEvents(t *testing.T, s, w statestore.Store) {
	if w == nil {
		w = s
	}
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "a", 1, 2)
	// Events already there: no wait.
	if err := w.WaitEvents(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	// Nothing new: the wait ends with its context.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.WaitEvents(short, "a", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvents with nothing new: err = %v, want DeadlineExceeded", err)
	}
	// A waiter is woken by an append.
	done := make(chan error, 1)
	go func() { done <- w.WaitEvents(ctx, "a", 2) }()
	select {
	case err := <-done:
		t.Fatalf("WaitEvents returned %v before an append", err)
	case <-time.After(100 * time.Millisecond):
	}
	appendN(t, s, "a", 3, 3)
	if err := Await(t, done, 10*time.Second, "WaitEvents not woken by an append"); err != nil {
		t.Fatal(err)
	}
	got, err := w.Events(ctx, "a", 2, 0)
	if err != nil || len(got) != 1 || got[0].Seq() != 3 {
		t.Fatalf("Events after the wake = %v, %v", got, err)
	}
}

func testDelete(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := s.CreateSession(ctx, session(id, "alice")); err != nil {
			t.Fatal(err)
		}
		appendN(t, s, id, 1, 3)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(ctx, "a", 3) }()
	if err := s.DeleteSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := Await(t, done, 10*time.Second, "WaitEvents not ended by the deletion"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("WaitEvents on a deleted session: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetSession(ctx, "a"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("GetSession after delete: err = %v", err)
	}
	if _, err := s.Events(ctx, "a", 0, 0); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Events after delete: err = %v", err)
	}
	list, err := s.ListSessions(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].ID != "b" {
		t.Fatalf("ListSessions after delete = %v, %v", ids(list), err)
	}
	// The id is free again, with an empty log.
	if err := s.CreateSession(ctx, session("a", "alice")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Events(ctx, "a", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("recreated session has events %v, %v", got, err)
	}
	if calls, _, err := s.ToolCalls(ctx, "a"); err != nil || len(calls) != 0 {
		t.Fatalf("recreated session has tool calls %v, %v", calls, err)
	}
	if tc, _, err := s.ToolCall(ctx, "a", "c1"); err != nil || tc != nil {
		t.Fatalf("recreated session has tool call %v, %v", tc, err)
	}
	// An id taken again by another owner moves to that owner's list.
	if err := s.DeleteSession(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, session("b", "bob")); err != nil {
		t.Fatal(err)
	}
	for owner, want := range map[string][]string{"alice": {"a"}, "bob": {"b"}} {
		if list, err := s.ListSessions(ctx, owner); err != nil || !slices.Equal(ids(list), want) {
			t.Fatalf("ListSessions(%s) after b changed owner = %v, %v; want %v", owner, ids(list), err, want)
		}
	}
}

func testRestart(t *testing.T, s statestore.Store, reopen func(*testing.T, statestore.Store) statestore.Store) {
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := s.CreateSession(ctx, session(id, "alice")); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, s, "a", 1, 30)
	if err := s.SetAgentSession(ctx, "a", "sess_9", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "a", statestore.StateReady, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "b", statestore.StateClosed, "closed by the client"); err != nil {
		t.Fatal(err)
	}
	wantEvents, err := s.Events(ctx, "a", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls, _, err := s.ToolCalls(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := keptBytes(wantEvents, wantCalls)
	s = reopen(t, s)
	list, err := s.ListSessions(ctx, "")
	if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Fatalf("ListSessions after restart = %v, %v", ids(list), err)
	}
	if owned, err := s.ListSessions(ctx, "alice"); err != nil || !slices.Equal(ids(owned), []string{"a", "b"}) {
		t.Fatalf("ListSessions(alice) after restart = %v, %v", ids(owned), err)
	}
	a := list[0]
	if a.State != statestore.StateReady || a.AgentSessionID != "sess_9" || a.ProtocolVersion != 2 ||
		a.LastSeq != 30 || a.TrimmedSeq != 10 || a.Owner != "alice" || a.Cwd != "/w" || a.Bytes != wantBytes {
		t.Fatalf("session a after restart = %+v (want %d bytes)", a, wantBytes)
	}
	if list[1].State != statestore.StateClosed || list[1].Detail != "closed by the client" {
		t.Fatalf("session b after restart = %+v", list[1])
	}
	gotEvents, err := s.Events(ctx, "a", 10, 0)
	if err != nil || !slices.EqualFunc(gotEvents, wantEvents, sameEvent) {
		t.Fatalf("events after restart: %d (err %v), want %d", len(gotEvents), err, len(wantEvents))
	}
	gotCalls, asOf, err := s.ToolCalls(ctx, "a")
	if err != nil || asOf != 30 || !slices.EqualFunc(gotCalls, wantCalls, func(x, y *acpv2.ToolCall) bool { return proto.Equal(x, y) }) {
		t.Fatalf("tool calls after restart = %v as of %d, %v", gotCalls, asOf, err)
	}
	// The log continues where it was.
	appendN(t, s, "a", 31, 31)
	if err := s.Append(ctx, "a", Encode(t, Event(31, "again")), nil); !errors.Is(err, statestore.ErrSeqConflict) {
		t.Fatalf("reused seq after restart: err = %v", err)
	}
}

func testShared(t *testing.T, a, b statestore.Store) {
	ctx := context.Background()
	if err := a.CreateSession(ctx, session("s", "alice")); err != nil {
		t.Fatal(err)
	}
	appendN(t, a, "s", 1, 5)
	rec, err := b.GetSession(ctx, "s")
	if err != nil || rec.LastSeq != 5 || rec.Owner != "alice" {
		t.Fatalf("GetSession on the second replica = %+v, %v", rec, err)
	}
	got, err := b.Events(ctx, "s", 0, 0)
	if err != nil || len(got) != 5 {
		t.Fatalf("Events on the second replica = %d, %v", len(got), err)
	}
	// Two writers cannot fork the log: the second one to use a seq loses.
	if err := b.Append(ctx, "s", Encode(t, Event(6, "b")), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, "s", Encode(t, Event(6, "a")), nil); !errors.Is(err, statestore.ErrSeqConflict) {
		t.Fatalf("second writer of seq 6: err = %v, want ErrSeqConflict", err)
	}
}

func testLeases(t *testing.T, a, b statestore.Store) {
	la, ok := a.(statestore.Leaser)
	if !ok {
		t.Fatalf("%T is shared between replicas but is not a Leaser", a)
	}
	lb := b.(statestore.Leaser)
	ctx := context.Background()
	if err := a.CreateSession(ctx, session("s", "")); err != nil {
		t.Fatal(err)
	}
	if h, err := lb.LeaseHolder(ctx, "s"); err != nil || h != "" {
		t.Fatalf("holder before any lease = %q, %v", h, err)
	}
	const ttl = 300 * time.Millisecond
	if err := la.AcquireLease(ctx, "s", "replica-a", ttl); err != nil {
		t.Fatal(err)
	}
	if err := lb.AcquireLease(ctx, "s", "replica-b", ttl); !errors.Is(err, statestore.ErrLeaseHeld) {
		t.Fatalf("acquire of a held lease: err = %v, want ErrLeaseHeld", err)
	}
	if h, err := lb.LeaseHolder(ctx, "s"); err != nil || h != "replica-a" {
		t.Fatalf("holder = %q, %v, want replica-a", h, err)
	}
	// Renewing extends it: past the first ttl, another holder still
	// cannot take it. (Without the extension the lease would have lapsed,
	// and this acquire would succeed.)
	// The check is only meaningful while the renewed lease runs: a round
	// in which the machine stalled past it is tried again, not failed.
	const long = 2 * time.Second
	for round := 1; ; round++ {
		if err := la.ReleaseLease(ctx, "s", "replica-a"); err != nil {
			t.Fatal(err)
		}
		if err := la.AcquireLease(ctx, "s", "replica-a", long); err != nil {
			t.Fatal(err)
		}
		first := time.Now()
		time.Sleep(long * 6 / 10)
		renewed := time.Now()
		if err := la.AcquireLease(ctx, "s", "replica-a", long); err != nil {
			t.Fatalf("renew: %v", err)
		}
		time.Sleep(time.Until(first.Add(long + long/10)))
		err := lb.AcquireLease(ctx, "s", "replica-b", ttl)
		if time.Since(renewed) >= long*9/10 && round < 3 {
			if err == nil {
				_ = lb.ReleaseLease(ctx, "s", "replica-b")
			}
			continue
		}
		if !errors.Is(err, statestore.ErrLeaseHeld) {
			t.Fatalf("acquire past the first ttl of a renewed lease: err = %v, want ErrLeaseHeld", err)
		}
		break
	}
	if err := la.AcquireLease(ctx, "s", "replica-a", ttl); err != nil {
		t.Fatal(err)
	}
	// Releasing by someone else does nothing; by the holder frees it.
	if err := lb.ReleaseLease(ctx, "s", "replica-b"); err != nil {
		t.Fatal(err)
	}
	if h, _ := lb.LeaseHolder(ctx, "s"); h != "replica-a" {
		t.Fatalf("holder after a foreign release = %q", h)
	}
	if err := la.ReleaseLease(ctx, "s", "replica-a"); err != nil {
		t.Fatal(err)
	}
	if err := lb.AcquireLease(ctx, "s", "replica-b", ttl); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	// A holder that stops renewing loses the lease when it lapses.
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := la.LeaseHolder(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if h == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an unrenewed lease did not lapse")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := la.AcquireLease(ctx, "s", "replica-a", ttl); err != nil {
		t.Fatalf("acquire after lapse: %v", err)
	}
}

// A changed tool call is kept as the bytes given, as the session gives
// a merged call's from within its event's: given bytes whose call holds a
// field the message lacks, ToolCalls has that field. ToolCalls hands out
// messages of its own.
func testCallsFromTheirEvents(t *testing.T, m statestore.Store) {
	ctx := context.Background()
	if err := m.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	merged := &acpv2.ToolCall{ToolCallId: "c1", Title: "read", Status: "completed"}
	other := &acpv2.ToolCall{ToolCallId: "c2", Title: "edit"}
	msg := &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_ToolCall{ToolCall: merged}}
	call, err := proto.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	extra := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)
	call = append(call, extra...)
	wire := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // seq
	wire = protowire.AppendBytes(protowire.AppendTag(wire, protowire.Number(encoded.ToolCall), protowire.BytesType), call)
	ev := encoded.Of(msg, wire)
	changed := append([]statestore.Call{{ID: "c1", Proto: ev.Field(encoded.ToolCall)}}, Calls(t, other)...)
	if err := m.Append(ctx, "a", []*encoded.Event{ev}, changed); err != nil {
		t.Fatal(err)
	}
	got, asOf, err := m.ToolCalls(ctx, "a")
	if err != nil || asOf != 1 || len(got) != 2 {
		t.Fatalf("ToolCalls = %v as of %d, %v", got, asOf, err)
	}
	if got[0].GetTitle() != "read" || !bytes.Equal(got[0].ProtoReflect().GetUnknown(), extra) {
		t.Errorf("the merged call is %v, unknown fields %x: not the bytes given", got[0], got[0].ProtoReflect().GetUnknown())
	}
	if got[1].GetTitle() != "edit" || len(got[1].ProtoReflect().GetUnknown()) != 0 {
		t.Errorf("the call without an event is %v", got[1])
	}
	got[0].Title = "changed"
	again, _, err := m.ToolCalls(ctx, "a")
	if err != nil || again[0].GetTitle() != "read" {
		t.Errorf("a change to a call ToolCalls gave reached the store: %v, %v", again, err)
	}
}

// keptBytes is what a session keeping events and calls holds, as
// statestore.Session.Bytes counts it.
func keptBytes(events []*encoded.Event, calls []*acpv2.ToolCall) int64 {
	n := 0
	for _, ev := range events {
		n += ev.Size()
	}
	for _, tc := range calls {
		n += proto.Size(tc)
	}
	return int64(n)
}

// testBytes checks a store whose sessions keep five events: a session's
// Bytes counts its kept events and its tool calls, each call as last
// changed, through retention, in GetSession and ListSessions alike.
func testBytes(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "alice")); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		events, err := s.Events(ctx, "a", 0, 0)
		if errors.Is(err, statestore.ErrTrimmed) {
			rec, _ := s.GetSession(ctx, "a")
			events, err = s.Events(ctx, "a", rec.TrimmedSeq, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		calls, _, err := s.ToolCalls(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		want := keptBytes(events, calls)
		rec, err := s.GetSession(ctx, "a")
		if err != nil || rec.Bytes != want {
			t.Fatalf("%s: GetSession's Bytes %d (%v), want %d", when, rec.Bytes, err, want)
		}
		list, err := s.ListSessions(ctx, "")
		if err != nil || len(list) != 1 || list[0].Bytes != want {
			t.Fatalf("%s: ListSessions' Bytes %v (%v), want %d", when, list, err, want)
		}
	}
	check("new")
	appendN(t, s, "a", 1, 3)
	check("three events, three calls")
	appendN(t, s, "a", 4, 12)
	check("past retention, calls changed")
	// A call changed without an event, larger.
	big := &acpv2.ToolCall{ToolCallId: "call0", Title: strings.Repeat("t", 1000)}
	if err := s.Append(ctx, "a", nil, Calls(t, big)); err != nil {
		t.Fatal(err)
	}
	check("a call changed alone")
}
