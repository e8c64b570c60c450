package boltstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// openLogged opens a store in a fresh file with its log's settings.
func openLogged(t testing.TB, opts statestore.Options, lo logOptions) *Store {
	t.Helper()
	s, err := openWith(filepath.Join(t.TempDir(), "gateway.db"), opts, lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The contract holds whether reads find the Appends in the log's entries
// (checkpoints never come but on Close) or in the file (a checkpoint
// every millisecond, racing the reads and writes).
func TestContractReadFromTheLog(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts statestore.Options) statestore.Store {
		return openLogged(t, opts, logOptions{every: time.Hour})
	})
}

func TestContractCheckpointingOften(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts statestore.Options) statestore.Store {
		return openLogged(t, opts, logOptions{every: time.Millisecond})
	})
}

// fileWrites is the number of writes bbolt made to the file.
func fileWrites(s *Store) int64 {
	st := s.db.Stats()
	return st.TxStats.GetWrite()
}

// fileSpills is the number of times bbolt spilled a commit's pages.
func fileSpills(s *Store) int64 {
	st := s.db.Stats()
	return st.TxStats.GetSpill()
}

// TestAppendsWriteTheLogNotTheFile: an Append of many sessions at once
// writes their events to the log, and not the pages of every session in
// the file; the checkpoint writes them all to the file in one commit.
func TestAppendsWriteTheLogNotTheFile(t *testing.T) {
	ctx := context.Background()
	s := openLogged(t, statestore.Options{}, logOptions{every: time.Hour})
	const sessions, events = 50, 10
	for i := range sessions {
		if err := s.CreateSession(ctx, &statestore.Session{ID: fmt.Sprint("s", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before, commits := fileWrites(s), fileSpills(s)
	errs := make(chan error, sessions)
	for i := range sessions {
		go func() {
			id := fmt.Sprint("s", i)
			for seq := uint64(1); seq <= events; seq++ {
				ev, tc := toolCallEvent(seq, fmt.Sprint(id, "-call"))
				if err := s.Append(ctx, id, storetest.Encode(t, ev), storetest.Calls(t, tc)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := fileWrites(s) - before; n != 0 {
		t.Fatalf("the Appends wrote the file %d times, want 0 (the log holds them)", n)
	}
	if fileSpills(s) != commits {
		t.Fatal("the Appends committed to the file")
	}
	segs, err := segments(s.path)
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	if fi, err := os.Stat(segmentPath(s.path, segs[0])); err != nil || fi.Size() == 0 {
		t.Fatalf("the log's segment: %v, %v", fi, err)
	}
	checkSessions := func(what string) {
		for i := range sessions {
			id := fmt.Sprint("s", i)
			got, err := s.Events(ctx, id, 0, 0)
			if err != nil || len(got) != events || got[events-1].Seq() != events {
				t.Fatalf("%s: session %s: %d events, %v", what, id, len(got), err)
			}
			tc, asOf, err := s.ToolCall(ctx, id, id+"-call")
			if err != nil || asOf != events || !proto.Equal(tc, toolCall(id+"-call", "in_progress", events)) {
				t.Fatalf("%s: session %s: call %v as of %d, %v", what, id, tc, asOf, err)
			}
		}
	}
	checkSessions("read from the log")
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if len(s.pend.all()) != 0 || s.pend.bytes != 0 {
		t.Fatalf("after the checkpoint the log's entries are still read: %d bytes", s.pend.bytes)
	}
	if segs, err := segments(s.path); err != nil || len(segs) != 1 || segs[0] != 2 {
		t.Fatalf("after the checkpoint, segments %v (%v), want the next one only", segs, err)
	}
	// In the file itself now.
	if err := s.db.View(func(tx *bolt.Tx) error {
		for i := range sessions {
			r, err := getRecord(tx, fmt.Sprint("s", i))
			if err != nil {
				return err
			}
			if r.LastSeq != events {
				return fmt.Errorf("session %s's record in the file is at seq %d", r.ID, r.LastSeq)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkSessions("read from the file")
}

// TestCrashKeepsWhatWasAcknowledged kills a process that appends as fast
// as it can: every Append that returned is in the store when it opens
// again, applied from the log (the file alone holds fewer), and the log
// it left is gone.
func TestCrashKeepsWhatWasAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BOLTSTORE_APPENDER="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked uint64
	lines := bufio.NewScanner(out)
	for acked < 300 && lines.Scan() {
		if n, err := strconv.ParseUint(strings.TrimPrefix(lines.Text(), "acked "), 10, 64); err == nil {
			acked = n
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 300 {
		t.Fatalf("the appender acknowledged %d appends before it ended", acked)
	}
	segs, err := segments(path)
	if err != nil || len(segs) == 0 {
		t.Fatalf("the killed process left no log: %v, %v", segs, err)
	}
	// What the file holds without the log.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var inFile uint64
	if err := db.View(func(tx *bolt.Tx) error {
		r, err := getRecord(tx, "a")
		if err == nil {
			inFile = r.LastSeq
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if inFile >= acked {
		t.Fatalf("the file alone holds seq %d of %d acknowledged: the test did not need the log", inFile, acked)
	}

	s := openAt(t, path, statestore.Options{})
	ctx := context.Background()
	rec, err := s.GetSession(ctx, "a")
	if err != nil || rec.LastSeq < acked {
		t.Fatalf("after the crash: %+v, %v; %d appends were acknowledged", rec, err, acked)
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil || uint64(len(got)) != rec.LastSeq {
		t.Fatalf("after the crash: %d events to seq %d, %v", len(got), rec.LastSeq, err)
	}
	for i, e := range storetest.Messages(t, got) {
		if want := storetest.Event(uint64(i+1), fmt.Sprint("event ", i+1)); !proto.Equal(e, want) {
			t.Fatalf("event %d = %v, want %v", i+1, e, want)
		}
	}
	if segs, err := segments(path); err != nil || len(segs) != 1 {
		t.Fatalf("after the open, segments %v (%v): the applied ones should be gone", segs, err)
	}
}

// TestMain runs the process TestCrashKeepsWhatWasAcknowledged kills, when
// that test starts this binary for it, and the tests otherwise.
func TestMain(m *testing.M) {
	if path := os.Getenv("BOLTSTORE_APPENDER"); path != "" {
		appendUntilKilled(path)
		return
	}
	os.Exit(m.Run())
}

// appendUntilKilled appends to session a of the store at path, one event
// at a time, saying each acknowledged, until the process is killed: the
// first 100 reach the file, the rest stay in the log.
func appendUntilKilled(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "appender:", err)
		os.Exit(1)
	}
	s, err := openWith(path, statestore.Options{}, logOptions{every: time.Hour})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		fail(err)
	}
	for seq := uint64(1); ; seq++ {
		e, err := encoded.New(storetest.Event(seq, fmt.Sprint("event ", seq)))
		if err != nil {
			fail(err)
		}
		if err := s.Append(ctx, "a", []*encoded.Event{e}, nil); err != nil {
			fail(err)
		}
		fmt.Println("acked", seq)
		if seq == 100 {
			if err := s.checkpoint(); err != nil {
				fail(err)
			}
		}
	}
}

// logWith appends events 1 to n to session a of a store at path whose log
// is never checkpointed, and leaves the store open, as a crash would.
func logWith(t *testing.T, path string, n uint64) {
	s := sessionA(t, path)
	storetest.AppendSized(t, s, "a", 1, n)
	abandon(t, s)
}

// loggedSegment logs five events as logWith does, and returns the log's
// segment's path and bytes.
func loggedSegment(t *testing.T, path string) (string, []byte) {
	logWith(t, path, 5)
	seg := segmentPath(path, 1)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	return seg, data
}

// sessionA opens a store at path whose log is never checkpointed, with a
// session a.
func sessionA(t *testing.T, path string) *Store {
	s, err := openWith(path, statestore.Options{}, logOptions{every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(context.Background(), &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTornWriteIsCut: a frame cut short at the end of the last segment
// (a crash in the middle of a write, never acknowledged) is dropped, and
// what came before it is kept.
func TestTornWriteIsCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	seg, data := loggedSegment(t, path)
	// Half of a sixth frame: the first one's bytes again, cut.
	_, size, err := readFrame(data)
	if err != nil {
		t.Fatal(err)
	}
	torn := append(data, data[:size/2]...)
	if err := os.WriteFile(seg, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, path, statestore.Options{})
	storetest.CheckKept(t, s, "a", 0, 5, "after a torn write")
}

// TestCorruptLogIsRefused: a frame that does not read in a segment that
// is not the last is corruption, which Open reports rather than drop what
// follows.
func TestCorruptLogIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	seg, data := loggedSegment(t, path)
	data[len(data)-3] ^= 0xff
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(segmentPath(path, 2), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, statestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("a corrupt log was opened")
	}
	if !strings.Contains(err.Error(), "write-ahead log") || !strings.Contains(err.Error(), seg) {
		t.Fatalf("error %q does not name the log's segment", err)
	}
}

// failingSegment is a segment file whose writes or syncs fail on demand.
type failingSegment struct {
	*os.File
	failWrite, failSync atomic.Bool
}

func (f *failingSegment) WriteAt(b []byte, off int64) (int, error) {
	if f.failWrite.Load() {
		// The bytes reach the file, but the write reports a failure.
		n, _ := f.File.WriteAt(b, off)
		return n, errors.New("input/output error")
	}
	return f.File.WriteAt(b, off)
}

func (f *failingSegment) Sync() error {
	if f.failSync.Load() {
		return errors.New("I/O error")
	}
	return f.File.Sync()
}

// openFailing opens a store at path whose segments fail on demand; seg
// is set to the one written.
func openFailing(t *testing.T, path string, seg *atomic.Pointer[failingSegment]) *Store {
	s, err := openWith(path, statestore.Options{}, logOptions{every: time.Hour, openSegment: func(p string) (walFile, error) {
		f, err := openSegment(p)
		if err != nil {
			return nil, err
		}
		fs := &failingSegment{File: f.(*os.File)}
		seg.Store(fs)
		return fs, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// abandon lets go of s's files as a crash would: no checkpoint.
func abandon(t *testing.T, s *Store) {
	close(s.stopCheckpoints)
	<-s.checkpointsDone
	if err := s.log.stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFailedWriteIsNotKept: an Append whose log write fails is refused
// and cut from the log, so that a crash right after it does not store
// what was refused, and the same seqs appended again are stored once.
func TestFailedWriteIsNotKept(t *testing.T) {
	ctx := context.Background()
	var seg atomic.Pointer[failingSegment]
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openFailing(t, path, &seg)
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	storetest.AppendSized(t, s, "a", 1, 3)
	seg.Load().failWrite.Store(true)
	if err := s.Append(ctx, "a", storetest.Encode(t, storetest.Event(4, "refused")), nil); err == nil || !strings.Contains(err.Error(), "input/output") {
		t.Fatalf("an Append whose write failed returned %v", err)
	}
	if rec, err := s.GetSession(ctx, "a"); err != nil || rec.LastSeq != 3 {
		t.Fatalf("after a failed write: %+v, %v", rec, err)
	}
	abandon(t, s)

	s = openFailing(t, path, &seg)
	storetest.CheckKept(t, s, "a", 0, 3, "after a failed write and a crash")
	storetest.AppendSized(t, s, "a", 4, 6)
	seg.Load().failWrite.Store(true)
	if err := s.Append(ctx, "a", storetest.Encode(t, storetest.Event(7, "refused")), nil); err == nil {
		t.Fatal("an Append whose write failed was acknowledged")
	}
	seg.Load().failWrite.Store(false)
	storetest.AppendSized(t, s, "a", 7, 7)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, statestore.Options{})
	storetest.CheckKept(t, s, "a", 0, 7, "after failed writes and a reopen")
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range storetest.Messages(t, got) {
		if !proto.Equal(e, storetest.SizedEvent(uint64(i+1))) {
			t.Fatalf("seq %d = %v", i+1, e)
		}
	}
}

// TestFailedSyncStopsTheLog: after a failed sync what the segment holds is
// unknown, so that Append and every later one are refused with a reason,
// rather than acknowledged on a log that may not hold them.
func TestFailedSyncStopsTheLog(t *testing.T) {
	ctx := context.Background()
	var seg atomic.Pointer[failingSegment]
	s := openFailing(t, filepath.Join(t.TempDir(), "gateway.db"), &seg)
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	storetest.AppendSized(t, s, "a", 1, 2)
	seg.Load().failSync.Store(true)
	for try := range 2 {
		err := s.Append(ctx, "a", storetest.Encode(t, storetest.SizedEvent(3)), nil)
		if err == nil || !strings.Contains(err.Error(), "restart the gateway") {
			t.Fatalf("try %d of seq 3 after a failed sync returned %v", try+1, err)
		}
		seg.Load().failSync.Store(false) // a sync that works again is not trusted
	}
	if rec, err := s.GetSession(ctx, "a"); err != nil || rec.LastSeq != 2 {
		t.Fatalf("after a failed sync: %+v, %v", rec, err)
	}
	// Restarted, as the error says: the refused Append was cut from the
	// log, and is not applied.
	path := s.path
	abandon(t, s)
	s = openAt(t, path, statestore.Options{})
	storetest.CheckKept(t, s, "a", 0, 2, "after a failed sync and a restart")
}

// TestLoggedAppendsOfADeletedSessionStayDeleted: a session deleted, and
// created again under its id, while its Appends are in the log only, does
// not get them back: not when read, not at the checkpoint, not on Open.
func TestLoggedAppendsOfADeletedSessionStayDeleted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := openWith(path, statestore.Options{}, logOptions{every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	storetest.AppendSized(t, s, "a", 1, 3)
	if err := s.DeleteSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	// Put the deleted incarnation's entries back, as a checkpoint that
	// took them before the delete would find them.
	s.logged([]*entry{{gen: 100, id: "a", order: 1, events: storetest.Encode(t, storetest.SizedEvent(1))}})
	storetest.CheckKept(t, s, "a", 0, 0, "created again")
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckKept(t, s, "a", 0, 0, "created again, checkpointed")
	storetest.AppendSized(t, s, "a", 1, 1)
	// The first incarnation's Appends in the log again, after the
	// second's, and a crash: the next Open drops them.
	if err := s.log.append(&entry{id: "a", order: 1, events: storetest.Encode(t, storetest.SizedEvent(2))}); err != nil {
		t.Fatal(err)
	}
	abandon(t, s)
	s = openAt(t, path, statestore.Options{})
	storetest.CheckKept(t, s, "a", 0, 1, "created again, reopened after a crash")
	calls, _, err := s.ToolCalls(ctx, "a")
	if err != nil || len(calls) != 0 {
		t.Fatalf("calls %v, %v", calls, err)
	}
}

// TestMergedCallsAreLoggedOnce: a changed call that is a merged tool
// call's event in the same Append (its bytes within the event's) is
// logged as that event's number, and read back as the call after a crash.
func TestMergedCallsAreLoggedOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := sessionA(t, path)
	ev, tc := toolCallEvent(1, "c1")
	tc.Title = strings.Repeat("long title ", 200)
	events := storetest.Encode(t, ev)
	other := toolCall("c2", "pending", 1)
	changed := append([]statestore.Call{{ID: "c1", Proto: events[0].Field(encoded.ToolCall)}}, storetest.Calls(t, other)...)
	if err := s.Append(ctx, "a", events, changed); err != nil {
		t.Fatal(err)
	}
	abandon(t, s)
	data, err := os.ReadFile(segmentPath(path, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) >= events[0].Size()+len(changed[0].Proto) {
		t.Fatalf("the log holds %d bytes for an event of %d: the call was written again", len(data), events[0].Size())
	}
	s = openAt(t, path, statestore.Options{})
	for _, want := range []*acpv2.ToolCall{tc, other} {
		got, _, err := s.ToolCall(ctx, "a", want.GetToolCallId())
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("call %s after the crash = %v, %v", want.GetToolCallId(), got, err)
		}
	}
}

// FuzzReadFrame: a frame made of any bytes is read or refused, never
// panics; a frame the log wrote reads back as written.
func FuzzReadFrame(f *testing.F) {
	ev, tc := toolCallEvent(3, "c")
	events := storetest.Encode(f, ev)
	e := &entry{gen: 7, id: "a", order: 2, events: events,
		calls: append([]statestore.Call{{ID: "c", Proto: events[0].Field(encoded.ToolCall)}}, storetest.Calls(f, tc)...)}
	frame := e.appendFrame(nil)
	f.Add(frame)
	f.Add(frame[:len(frame)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, err := readFrame(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("read %d bytes of %d", n, len(b))
		}
		again, m, err := readFrame(got.appendFrame(nil))
		if err != nil || m > got.frameBound() {
			t.Fatalf("a frame read does not read back when written again: %v", err)
		}
		if again.gen != got.gen || again.id != got.id || again.order != got.order || len(again.events) != len(got.events) || len(again.calls) != len(got.calls) {
			t.Fatalf("read back %+v, want %+v", again, got)
		}
		for i, e := range got.events {
			if !bytes.Equal(again.events[i].Proto(), e.Proto()) {
				t.Fatalf("event %d read back %x, want %x", i, again.events[i].Proto(), e.Proto())
			}
		}
		for i, c := range got.calls {
			if again.calls[i].ID != c.ID || !bytes.Equal(again.calls[i].Proto, c.Proto) {
				t.Fatalf("call %d read back %q, want %q", i, again.calls[i].Proto, c.Proto)
			}
		}
	})
}

// BenchmarkCheckpoint applies a checkpoint's worth of one session's events
// to the file (each op 1,000 events of about 500 bytes, logged in batches
// of 10), and reports the pages bbolt wrote per event: a figure the host's
// load does not change.
func BenchmarkCheckpoint(b *testing.B) {
	ctx := context.Background()
	s := openLogged(b, statestore.Options{}, logOptions{every: time.Hour})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		b.Fatal(err)
	}
	var seq uint64
	var events int
	var pages int64
	for b.Loop() {
		b.StopTimer()
		for range 100 {
			batch := make([]*acpv2.SessionEvent, 10)
			for i := range batch {
				seq++
				batch[i] = storetest.Event(seq, strings.Repeat("x", 480))
			}
			if err := s.Append(ctx, "a", storetest.Encode(b, batch...), nil); err != nil {
				b.Fatal(err)
			}
			events += len(batch)
		}
		before := fileWrites(s)
		b.StartTimer()
		if err := s.checkpoint(); err != nil {
			b.Fatal(err)
		}
		pages += fileWrites(s) - before
	}
	b.ReportMetric(float64(pages)/float64(events), "pages/event")
}

// TestCappedSessionDoesNotCheckpointEachAppend: a session at its retention
// cap writes to the file at once (its trims), but only its first such
// Append applies the log first: the others' Appends stay in the log.
func TestCappedSessionDoesNotCheckpointEachAppend(t *testing.T) {
	ctx := context.Background()
	s := openLogged(t, statestore.Options{MaxEvents: 5}, logOptions{every: time.Hour})
	for _, id := range []string{"capped", "other"} {
		if err := s.CreateSession(ctx, &statestore.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	storetest.AppendSized(t, s, "capped", 1, 5)
	storetest.AppendSized(t, s, "other", 1, 1)
	storetest.AppendSized(t, s, "capped", 6, 6) // over the cap: the log is applied, then the file written
	segs, err := segments(s.path)
	if err != nil {
		t.Fatal(err)
	}
	// The other session stays under the cap: its Appends are logged.
	for seq := uint64(2); seq <= 5; seq++ {
		storetest.AppendSized(t, s, "other", seq, seq)
		storetest.AppendSized(t, s, "capped", 2*seq+3, 2*seq+4)
	}
	if now, err := segments(s.path); err != nil || len(now) != 1 || now[0] != segs[len(segs)-1] {
		t.Fatalf("segments %v after the capped session's Appends, %v before: each applied the log", now, segs)
	}
	if len(s.pend.of("other")) != 4 {
		t.Fatalf("the other session has %d Appends in the log, want 4", len(s.pend.of("other")))
	}
	storetest.CheckKept(t, s, "capped", 9, 14, "the capped session")
	storetest.CheckKept(t, s, "other", 0, 5, "the other session")
}

// TestCorruptSessionDoesNotStopTheCheckpoint: a session whose record turns
// unreadable while its Appends are in the log costs it those Appends, not
// every other session's checkpoint, nor the file's next Open.
func TestCorruptSessionDoesNotStopTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := openWith(path, statestore.Options{}, logOptions{every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bad", "good"} {
		if err := s.CreateSession(ctx, &statestore.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
		storetest.AppendSized(t, s, id, 1, 3)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Put([]byte("bad"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatalf("a corrupt session failed the checkpoint: %v", err)
	}
	storetest.AppendSized(t, s, "good", 4, 4)
	abandon(t, s)
	s = openAt(t, path, statestore.Options{})
	storetest.CheckKept(t, s, "good", 0, 4, "beside a corrupt session")
}
