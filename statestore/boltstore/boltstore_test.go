package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// openAt opens the store at path and closes it when the test ends.
func openAt(t testing.TB, path string, opts statestore.Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// open opens a store in a fresh file.
func open(t *testing.T, opts statestore.Options) statestore.Store {
	return openAt(t, filepath.Join(t.TempDir(), "state", "gateway.db"), opts)
}

// reopen closes s and opens its file again.
func reopen(t *testing.T, s statestore.Store) statestore.Store {
	b := s.(*Store)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return openAt(t, b.path, b.opts)
}

func TestContract(t *testing.T) { storetest.Run(t, open) }

func TestDurable(t *testing.T) { storetest.RunDurable(t, open, reopen) }

func TestLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	openAt(t, path, statestore.Options{})
	start := time.Now()
	s, err := Open(path, statestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("a second Open of a held file succeeded")
	}
	if want := fmt.Sprintf("statestore: bolt file %s is locked by another process", path); err.Error() != want {
		t.Fatalf("err = %q, want %q", err, want)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the second Open took %v", d)
	}
}

// rawUpdate changes the bolt file at path directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := Open(path, statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyVersion, []byte("99")) })
	if s, err := Open(path, statestore.Options{}); err == nil || !strings.Contains(err.Error(), `unknown format version "99"`) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open of a version 99 file: err = %v", err)
	}
}

func TestCorruptRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := Open(path, statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bad", "badlog", "good"} {
		if err := s.CreateSession(ctx, &statestore.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, storetest.Encode(t, storetest.Event(1, "x")), storetest.Calls(t, &acpv2.ToolCall{ToolCallId: "c"})); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSessions).Put([]byte("bad"), []byte(`{"id": "bad", "last_seq": "x`)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketEvents).Bucket([]byte("badlog")).Put(u64(1), []byte{0xff, 0xff}); err != nil {
			return err
		}
		return tx.Bucket(bucketCalls).Bucket([]byte("badlog")).Put(u64(1), []byte{0xff, 0xff})
	})
	s = openAt(t, path, statestore.Options{})

	check := func(op, id string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "session "+id) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s: err = %v, want a corruption error naming session %s", op, err, id)
		}
	}
	_, err = s.GetSession(ctx, "bad")
	check("GetSession", "bad", err)
	_, err = s.ListSessions(ctx, "")
	check("ListSessions", "bad", err)
	_, err = s.ListSessions(ctx, "alice") // its owner is unknown
	check("ListSessions(alice)", "bad", err)
	check("SetState", "bad", s.SetState(ctx, "bad", statestore.StateReady, ""))
	check("Append", "bad", s.Append(ctx, "bad", storetest.Encode(t, storetest.Event(2, "y")), nil))
	_, err = s.Events(ctx, "bad", 0, 0)
	check("Events", "bad", err)
	_, err = s.Events(ctx, "badlog", 0, 0)
	check("Events", "badlog", err)
	_, _, err = s.ToolCalls(ctx, "badlog")
	check("ToolCalls", "badlog", err)
	check("WaitEvents", "bad", s.WaitEvents(ctx, "bad", 5))

	// The good session is still served, and a corrupt one can be deleted.
	if got, err := s.Events(ctx, "good", 0, 0); err != nil || len(got) != 1 {
		t.Fatalf("Events(good) = %v, %v", got, err)
	}
	if err := s.DeleteSession(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListSessions(ctx, ""); err != nil || len(list) != 2 {
		t.Fatalf("ListSessions after deleting the corrupt session = %v, %v", list, err)
	}
	if list, err := s.ListSessions(ctx, "alice"); err != nil || len(list) != 0 {
		t.Fatalf("ListSessions(alice) after deleting the corrupt session = %v, %v", list, err)
	}
}

// The owner index is updated after each commit, so a delete and a create
// again of one id may update it in either order: the later incarnation
// (the larger order key) is what stays.
func TestOwnerIndexOutOfOrder(t *testing.T) {
	t.Parallel()
	s := open(t, statestore.Options{}).(*Store)
	s.owned("alice", "c", 2)
	s.owned("alice", "b", 3) // b created again
	s.owned("alice", "b", 1) // the first b's create, late
	if got := s.ownedBy("alice"); !slices.Equal(got, []string{"c", "b"}) {
		t.Fatalf("after a late create: ownedBy = %v, want [c b]", got)
	}
	s.disowned("alice", "b", 1) // the first b's delete, late
	if got := s.ownedBy("alice"); !slices.Equal(got, []string{"c", "b"}) {
		t.Fatalf("after a late delete: ownedBy = %v, want [c b]", got)
	}
	s.disowned("alice", "b", 3)
	if got := s.ownedBy("alice"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after deleting b: ownedBy = %v, want [c]", got)
	}
}

// toolCall returns a tool call of a realistic size.
func toolCall(id, status string, seq uint64) *acpv2.ToolCall {
	input, _ := structpb.NewValue(map[string]any{"command": "go test ./...", "timeout_ms": 120000.0})
	return &acpv2.ToolCall{
		ToolCallId: id, Title: "Run the tests of the module", Kind: "execute", Status: status,
		Content: []*acpv2.ToolCallContent{{Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{
			Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: fmt.Sprintf("seq %d: %s", seq, strings.Repeat("ok  \tgithub.com/acp-gateway/acp-gateway/statestore\t0.1s\n", 5))}},
		}}}},
		Locations: []*acpv2.ToolCallLocation{{Path: "/work/main/statestore/statestore.go"}},
		RawInput:  input,
	}
}

// toolCallEvent returns event seq, a merged tool call, and the call.
func toolCallEvent(seq uint64, callID string) (*acpv2.SessionEvent, *acpv2.ToolCall) {
	tc := toolCall(callID, "in_progress", seq)
	return &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_ToolCall{ToolCall: tc}}, tc
}

func TestConcurrentAppendsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	const sessions, events = 32, 50
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openAt(t, path, statestore.Options{})
	var wg sync.WaitGroup
	for i := range sessions {
		id := fmt.Sprint("s", i)
		if err := s.CreateSession(ctx, &statestore.Session{ID: id, Owner: "o"}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for seq := uint64(1); seq <= events; seq++ {
				ev, tc := toolCallEvent(seq, fmt.Sprint(id, "-call", seq%4))
				if err := s.Append(ctx, id, storetest.Encode(t, ev), storetest.Calls(t, tc)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, statestore.Options{})
	list, err := s.ListSessions(ctx, "o")
	if err != nil || len(list) != sessions {
		t.Fatalf("ListSessions after reopen: %d sessions, %v", len(list), err)
	}
	for i, rec := range list {
		id := fmt.Sprint("s", i)
		if rec.ID != id || rec.LastSeq != events {
			t.Fatalf("session %d after reopen = %+v", i, rec)
		}
		got, err := s.Events(ctx, id, 0, 0)
		if err != nil || len(got) != events {
			t.Fatalf("session %s: %d events after reopen, %v", id, len(got), err)
		}
		for j, e := range storetest.Messages(t, got) {
			want, _ := toolCallEvent(uint64(j+1), fmt.Sprint(id, "-call", (j+1)%4))
			if !proto.Equal(e, want) {
				t.Fatalf("session %s event %d = %v, want %v", id, j+1, e, want)
			}
		}
		calls, asOf, err := s.ToolCalls(ctx, id)
		if err != nil || asOf != events || len(calls) != 4 {
			t.Fatalf("session %s: %d tool calls as of %d, %v", id, len(calls), asOf, err)
		}
		// First seen in the order call1, call2, call3, call0; each holds
		// its last update.
		for k, c := range calls {
			n := uint64(k + 1)
			last := events - (events-n)%4
			if want := toolCall(fmt.Sprint(id, "-call", n%4), "in_progress", last); !proto.Equal(c, want) {
				t.Fatalf("session %s tool call %d = %v, want %v", id, k, c, want)
			}
		}
	}
}

// TestRacingWriters has two writers per session race for every seq, so
// that refused appends share batches with accepted ones: each seq is won
// exactly once, and the refusals do not fail the other appends.
func TestRacingWriters(t *testing.T) {
	ctx := context.Background()
	const sessions, events = 8, 40
	s := open(t, statestore.Options{MaxEvents: 25})
	var wins [sessions][events + 1]atomic.Int32
	var wg sync.WaitGroup
	for i := range sessions {
		id := fmt.Sprint("s", i)
		if err := s.CreateSession(ctx, &statestore.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
		for w := range 2 {
			wg.Go(func() {
				for seq := uint64(1); seq <= events; seq++ {
					ev := storetest.Event(seq, fmt.Sprint("writer ", w))
					err := s.Append(ctx, id, storetest.Encode(t, ev), storetest.Calls(t, &acpv2.ToolCall{ToolCallId: fmt.Sprint(seq), Title: fmt.Sprint(w)}))
					switch {
					case err == nil:
						wins[i][seq].Add(1)
					case !errors.Is(err, statestore.ErrSeqConflict):
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for i := range sessions {
		id := fmt.Sprint("s", i)
		for seq := 1; seq <= events; seq++ {
			if n := wins[i][seq].Load(); n != 1 {
				t.Fatalf("session %s seq %d was appended %d times", id, seq, n)
			}
		}
		rec, err := s.GetSession(ctx, id)
		if err != nil || rec.LastSeq != events || rec.TrimmedSeq != events-25 {
			t.Fatalf("session %s = %+v, %v", id, rec, err)
		}
		got, err := s.Events(ctx, id, events-25, 0)
		if err != nil || len(got) != 25 || got[0].Seq() != events-24 {
			t.Fatalf("session %s: %d events, %v", id, len(got), err)
		}
		calls, _, err := s.ToolCalls(ctx, id)
		if err != nil || len(calls) != events {
			t.Fatalf("session %s: %d tool calls, %v", id, len(calls), err)
		}
		for k, c := range calls {
			if c.GetToolCallId() != fmt.Sprint(k+1) {
				t.Fatalf("session %s tool call %d is %q", id, k, c.GetToolCallId())
			}
		}
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s := open(t, statestore.Options{}).(*Store)
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(ctx, "a", 0) }()
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Await(t, done, 10*time.Second, "WaitEvents not ended by Close"); err == nil {
		t.Fatal("WaitEvents returned nil when the store closed")
	}
	errs := map[string]error{
		"Create":  s.CreateSession(ctx, &statestore.Session{ID: "b"}),
		"Append":  s.Append(ctx, "a", storetest.Encode(t, storetest.Event(1, "x")), nil),
		"Delete":  s.DeleteSession(ctx, "a"),
		"Wait":    s.WaitEvents(ctx, "a", 0),
		"Close":   s.Close(),
		"SetStat": s.SetState(ctx, "a", statestore.StateClosed, ""),
	}
	_, errs["Get"] = s.GetSession(ctx, "a")
	_, errs["List"] = s.ListSessions(ctx, "")
	_, errs["Events"] = s.Events(ctx, "a", 0, 0)
	_, _, errs["ToolCalls"] = s.ToolCalls(ctx, "a")
	for op, err := range errs {
		if err == nil {
			t.Errorf("%s after Close succeeded", op)
		}
	}
}

// benchStore opens a store for a benchmark.
func benchStore(b *testing.B) *Store {
	return openAt(b, filepath.Join(b.TempDir(), "gateway.db"), statestore.Options{MaxEvents: 10000})
}

// BenchmarkListOwner lists one user's sessions in a file of 2,000 (serve's
// default --max-sessions and --max-ended-sessions, full) held by 50 users:
// what the per-user session limit costs each CreateSession.
func BenchmarkListOwner(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	// Each user creates its sessions at once with the others, so that the
	// creates share commits.
	var wg sync.WaitGroup
	for user := range 50 {
		wg.Go(func() {
			for i := range 40 {
				rec := &statestore.Session{
					ID: fmt.Sprintf("s_%012x%012x", user, i), Owner: fmt.Sprint("user", user), Agent: "demo", Cwd: "/home/user/project",
					State: statestore.StateClosed, CreatedAt: time.Now(), AgentSessionID: "sess_0123456789", ProtocolVersion: 1,
				}
				if err := s.CreateSession(ctx, rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	for b.Loop() {
		if list, err := s.ListSessions(ctx, "user7"); err != nil || len(list) != 40 {
			b.Fatalf("ListSessions = %d sessions, %v; want 40", len(list), err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		b.Fatal(err)
	}
	ev, _ := toolCallEvent(1, "call")
	b.SetBytes(int64(proto.Size(ev)))
	var seq uint64
	for b.Loop() {
		seq++
		ev, tc := toolCallEvent(seq, "call")
		if err := s.Append(ctx, "a", storetest.Encode(b, ev), storetest.Calls(b, tc)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkAppendParallel(b *testing.B) {
	// Appends mostly wait for the disk, so run many sessions per CPU.
	benchAppendSessions(b, 16)
}

// BenchmarkAppendManySessions has 500 sessions (on 2 CPUs) append at
// once, as many agents streaming at a realistic rate do.
func BenchmarkAppendManySessions(b *testing.B) { benchAppendSessions(b, 250) }

// benchAppendSessions has parallelism sessions per CPU append one event
// and the call it changed at a time.
func benchAppendSessions(b *testing.B, parallelism int) {
	ctx := context.Background()
	s := benchStore(b)
	ev, _ := toolCallEvent(1, "call")
	b.SetBytes(int64(proto.Size(ev)))
	b.SetParallelism(parallelism)
	var sessions, total atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprint("s", sessions.Add(1))
		if err := s.CreateSession(ctx, &statestore.Session{ID: id}); err != nil {
			b.Error(err)
			return
		}
		var seq uint64
		for pb.Next() {
			seq++
			ev, tc := toolCallEvent(seq, "call")
			if err := s.Append(ctx, id, storetest.Encode(b, ev), storetest.Calls(b, tc)); err != nil {
				b.Error(err)
				return
			}
		}
		total.Add(int64(seq))
	})
	b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(sessions.Load()), "sessions")
}

// A record without the count of its events' bytes (written before it was
// kept) has it counted at its next append, and the byte cap holds from
// there.
func TestEventBytesCountedForOldRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openAt(t, path, statestore.Options{})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	storetest.AppendSized(t, s, "a", 1, 10)
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		var rec map[string]any
		if err := json.Unmarshal(b.Get([]byte("a")), &rec); err != nil {
			return err
		}
		if _, ok := rec["event_bytes"]; !ok {
			return fmt.Errorf("the record has no event_bytes: %v", rec)
		}
		delete(rec, "event_bytes")
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return b.Put([]byte("a"), data)
	})
	s = openAt(t, path, statestore.Options{MaxEventBytes: 5*storetest.SizedEventBytes + 1})
	storetest.AppendSized(t, s, "a", 11, 11)
	storetest.CheckKept(t, s, "a", 6, 11, "five events' bytes kept")
}

// A file written by a gateway that did not keep the ended bucket holds
// closed sessions in none: Open enters them, by when they closed (a
// record without StateChangedAt by CreatedAt), and holds them to the cap
// from then on, the first closed deleted first. Opened with a lower cap,
// the file is trimmed to it.
func TestEndedSessionsOfAnEarlierVersionAdopted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	old := openAt(t, path, statestore.Options{})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c", "d", "e", "open"} {
		rec := &statestore.Session{ID: id, Owner: "alice", State: statestore.StateReady, CreatedAt: base.Add(time.Duration(i) * time.Minute)}
		if err := old.CreateSession(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b", "c", "e"} {
		if err := old.SetState(ctx, id, statestore.StateClosed, ""); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	// As the earlier version left them: closed c, a, e, and b before
	// StateChangedAt was kept (it closes by its CreatedAt, first).
	closedAt := map[string]time.Time{"c": base.Add(time.Hour), "a": base.Add(2 * time.Hour), "e": base.Add(3 * time.Hour)}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketEnded); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Delete(keyEnded); err != nil {
			return err
		}
		for _, id := range []string{"a", "b", "c", "e"} {
			r, err := getRecord(tx, id)
			if err != nil {
				return err
			}
			r.Ended, r.StateChangedAt = 0, closedAt[id]
			if err := putRecord(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	closed := func(s *Store) []string {
		t.Helper()
		list, err := s.ListSessions(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range list {
			if r.State == statestore.StateClosed {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	s := openAt(t, path, statestore.Options{MaxEndedSessions: 3})
	if got := closed(s); !slices.Equal(got, []string{"a", "c", "e"}) {
		t.Fatalf("closed sessions after the upgrade %v, want [a c e]", got)
	}
	if err := s.SetState(ctx, "d", statestore.StateClosed, ""); err != nil {
		t.Fatal(err)
	}
	if got := closed(s); !slices.Equal(got, []string{"a", "d", "e"}) {
		t.Fatalf("closed sessions after d closed %v, want [a d e]", got)
	}
	s.Close()
	s = openAt(t, path, statestore.Options{MaxEndedSessions: 1})
	if got := closed(s); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("closed sessions opened with a cap of 1: %v, want [d]", got)
	}
	if list, err := s.ListSessions(ctx, ""); err != nil || len(list) != 2 {
		t.Fatalf("%d sessions kept, %v; want open and d", len(list), err)
	}
}
