package session

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

func testSession(t *testing.T, buffer int) *Session {
	t.Helper()
	return testSessionOf(t, Options{WatchBuffer: buffer})
}

// testSessionOf returns a session of a manager with opts (and no idle
// timeout).
func testSessionOf(t *testing.T, opts Options) *Session {
	t.Helper()
	opts.IdleTimeout = -1
	m := NewManager(opts)
	rec := &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", CreatedAt: time.Now()}
	if err := m.opts.Store.CreateSession(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return newSession(m, rec, nil)
}

// emitText emits n text events one at a time, each stored and published
// before the next.
func emitText(t *testing.T, s *Session, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		ev := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: fmt.Sprint(i)}}}}}}
		s.mu.Lock()
		err := s.emitLocked([]*acpv2.SessionEvent{ev}, nil)
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		stored(t, s)
	}
}

// stored waits until the events s has queued are in the store and
// published to its watchers.
func stored(t testing.TB, s *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.flush(ctx); err != nil {
		t.Fatalf("storing the session's events: %v", err)
	}
}

// update hands s updates as its agent's reader does, and waits until
// their events are stored.
func update(t testing.TB, s *Session, ups []agent.Update) {
	t.Helper()
	s.SessionUpdates(ups)
	stored(t, s)
}

func TestLaggingWatcherIsCutOffWithoutBlocking(t *testing.T) {
	t.Parallel()
	s := testSession(t, 4)
	slow := s.Watch(0)
	fast := s.Watch(0)
	ctx := context.Background()

	// Emitting never waits for the slow watcher, which reads nothing; the
	// fast one keeps up as long as it reads (it reads each step).
	dst := make([]*encoded.Event, 2)
	for i := uint64(0); i < 5; i++ {
		emitText(t, s, 2)
		checkRun(t, seqsOf(t, fast, dst, 2), 2*i+1)
	}

	// The slow one fell off the ring: the events it missed are gone from
	// it, so it is told so at once, with the seq to resume after.
	if _, err := next(ctx, slow); !errors.Is(err, ErrLagging) {
		t.Fatalf("slow watcher: err = %v, want ErrLagging", err)
	}
	if slow.LastSeq() != 0 {
		t.Fatalf("LastSeq = %d, want 0 (the afterSeq to resume from)", slow.LastSeq())
	}

	// Resuming from there replays the rest from the store, then goes live.
	resumed := s.Watch(slow.LastSeq())
	for want := uint64(1); want <= 10; want++ {
		ev, err := next(ctx, resumed)
		if err != nil || ev.GetSeq() != want {
			t.Fatalf("resumed watcher: event %v, err %v, want seq %d", ev, err, want)
		}
	}
	emitText(t, s, 1)
	if ev, err := next(ctx, resumed); err != nil || ev.GetSeq() != 11 {
		t.Fatalf("resumed watcher live: %v, %v", ev, err)
	}
}

func TestReplayLongerThanOnePage(t *testing.T) {
	t.Parallel()
	s := testSession(t, 8)
	emitText(t, s, replayPage*2+7)
	sub := s.Watch(3)
	for want := uint64(4); want <= replayPage*2+7; want++ {
		ev, err := next(context.Background(), sub)
		if err != nil || ev.GetSeq() != want {
			t.Fatalf("event %v, err %v, want seq %d", ev, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := next(ctx, sub); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the end: %v, want to wait for live events", err)
	}
}

// A subscription that starts behind the ring replays from the store what
// was stored when it subscribed, even when the ring laps it meanwhile (a
// flood under way): only then is it cut off. Were it cut off at once, a
// client resuming behind a flood would be cut off again and again with
// nothing read, and never catch up.
func TestLappedReplayReturnsWhatWasStoredFirst(t *testing.T) {
	t.Parallel()
	const buffer, backlog = 4, replayPage + 10
	s := testSession(t, buffer)
	emitText(t, s, backlog)
	sub := s.Watch(2)
	emitText(t, s, 3*buffer) // laps the ring before sub reads anything
	seqs, err := collect(sub, make([]*encoded.Event, 7), backlog-2+1)
	checkRun(t, seqs, 3)
	if len(seqs) != backlog-2 || !errors.Is(err, ErrLagging) {
		t.Fatalf("lapped in its replay: %d events (%v), err %v; want seqs 3 to %d, then ErrLagging", len(seqs), seqs, err, backlog)
	}
	if sub.LastSeq() != backlog {
		t.Fatalf("LastSeq = %d, want %d (the afterSeq to resume from)", sub.LastSeq(), backlog)
	}
	// Resuming from there, it goes on from the store.
	resumed := s.Watch(sub.LastSeq())
	defer resumed.Close()
	checkRun(t, seqsOf(t, resumed, make([]*encoded.Event, 5), 3*buffer), backlog+1)
}

// next reads sub's next event with NextBatch, and checks that it comes
// with its encoding.
func next(ctx context.Context, sub Stream) (*acpv2.SessionEvent, error) {
	var one [1]*encoded.Event
	if _, err := sub.NextBatch(ctx, one[:]); err != nil {
		return nil, err
	}
	if err := checkWire(one[0]); err != nil {
		return nil, err
	}
	return one[0].Message()
}

// decoded returns a func that gives the messages of events a store read,
// failing the test when one does not decode: decoded(t)(st.Events(...)).
func decoded(t testing.TB) func([]*encoded.Event, error) ([]*acpv2.SessionEvent, error) {
	return func(events []*encoded.Event, err error) ([]*acpv2.SessionEvent, error) {
		t.Helper()
		if err != nil {
			return nil, err
		}
		return storetest.Messages(t, events), nil
	}
}

// checkWire says whether e's encoding is its message's, with its seq.
func checkWire(e *encoded.Event) error {
	back := &acpv2.SessionEvent{}
	msg, merr := e.Message()
	if err := proto.Unmarshal(e.Proto(), back); err != nil || merr != nil || e.Proto() == nil || !proto.Equal(back, msg) || e.Seq() != msg.GetSeq() {
		return fmt.Errorf("event %d comes with an encoding of %v (%v), want %v (%v)", e.Seq(), back, err, msg, merr)
	}
	return nil
}

// collect reads sub with NextBatch calls of dst's size until it has n
// events or an error, checking each batch is at most len(dst). It may run
// in its own goroutine.
func collect(sub Stream, dst []*encoded.Event, n int) ([]uint64, error) {
	var seqs []uint64
	for len(seqs) < n {
		got, err := sub.NextBatch(context.Background(), dst)
		if err != nil {
			return seqs, err
		}
		if got < 1 || got > len(dst) {
			return seqs, fmt.Errorf("NextBatch returned %d events for a batch of %d", got, len(dst))
		}
		for _, ev := range dst[:got] {
			if err := checkWire(ev); err != nil {
				return seqs, err
			}
			seqs = append(seqs, ev.Seq())
		}
	}
	return seqs, nil
}

func seqsOf(t *testing.T, sub Stream, dst []*encoded.Event, n int) []uint64 {
	t.Helper()
	seqs, err := collect(sub, dst, n)
	if err != nil {
		t.Fatalf("after %v: %v", seqs, err)
	}
	return seqs
}

func checkRun(t *testing.T, seqs []uint64, first uint64) {
	t.Helper()
	for i, q := range seqs {
		if q != first+uint64(i) {
			t.Fatalf("seqs %v: want a run from %d", seqs, first)
		}
	}
}

// An unread subscription holds nothing up: the session publishes to a
// ring it shares with every watcher, and the subscription is cut off only
// once its next event has left the ring.
func TestUnreadSubscriptionsAreCutOffOnlyOffTheRing(t *testing.T) {
	t.Parallel()
	const buffer = 8
	s := testSession(t, buffer)
	unread := make([]*Subscription, 1000)
	for i := range unread {
		unread[i] = s.Watch(0)
	}
	full, over := s.Watch(0), s.Watch(0)
	// Exactly a ring's worth: every subscription can still read it all.
	emitText(t, s, buffer)
	checkRun(t, seqsOf(t, full, make([]*encoded.Event, 3), buffer), 1)
	// One more: the subscriptions still at seq 1 fell off; the one that
	// read on does not.
	emitText(t, s, 1)
	if n, err := over.NextBatch(context.Background(), make([]*encoded.Event, 4)); n != 0 || !errors.Is(err, ErrLagging) {
		t.Fatalf("a subscription a ring and one behind: %d events, err %v; want ErrLagging", n, err)
	}
	if ev, err := next(context.Background(), full); err != nil || ev.GetSeq() != buffer+1 {
		t.Fatalf("the subscription that read on: %v, %v", ev, err)
	}
	// Many rings' worth with a thousand unread subscriptions: publishing
	// never waits for them.
	emitText(t, s, 10*buffer)
	for _, sub := range unread[:10] {
		if _, err := next(context.Background(), sub); !errors.Is(err, ErrLagging) {
			t.Fatalf("unread subscription: %v, want ErrLagging", err)
		}
	}
	// A cut-off subscription is unregistered; the others stay until they
	// read or close.
	s.mu.Lock()
	n := len(s.subs)
	s.mu.Unlock()
	if want := len(unread) - 10 + 1; n != want {
		t.Fatalf("%d subscriptions registered, want %d", n, want)
	}
	for _, sub := range unread {
		sub.Close()
	}
	full.Close()
}

// Subscribing allocates no per-subscription buffer: the events are held
// once, in the session's ring.
func TestSubscriptionsShareOneBuffer(t *testing.T) {
	s := testSession(t, 1024)
	s.Watch(0).Close() // the ring, made once
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	subs := make([]*Subscription, 1000)
	for i := range subs {
		subs[i] = s.Watch(0)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / uint64(len(subs)); per > 1024 {
		t.Fatalf("a subscription allocates %d bytes; a 1,024-event buffer of its own would be 8 KiB", per)
	}
	for _, sub := range subs {
		sub.Close()
	}
}

// NextBatch returns the stored events, then the live ones, in order and
// in batches no larger than asked; then the events published before the
// end, then the end.
func TestNextBatchKeepsOrderAndEndings(t *testing.T) {
	t.Parallel()
	s := testSession(t, 16)
	emitText(t, s, 5)
	sub := s.Watch(1) // replays 2..5 from the store
	emitText(t, s, 10)
	dst := make([]*encoded.Event, 3)
	checkRun(t, seqsOf(t, sub, dst, 14), 2)
	// Waits for the next event.
	got := make(chan []uint64)
	go func() {
		seqs, _ := collect(sub, make([]*encoded.Event, 8), 1)
		got <- seqs
	}()
	emitText(t, s, 1)
	if seqs := <-got; len(seqs) != 1 || seqs[0] != 16 {
		t.Fatalf("after waiting: %v, want [16]", seqs)
	}
	// Published, then the end: the events first.
	emitText(t, s, 2)
	s.release(ErrShutdown)
	emitText(t, s, 1) // after the end: not delivered
	checkRun(t, seqsOf(t, sub, make([]*encoded.Event, 8), 2), 17)
	if n, err := sub.NextBatch(context.Background(), dst); n != 0 || !errors.Is(err, ErrShutdown) {
		t.Fatalf("after the last event: %d events, err %v; want ErrShutdown", n, err)
	}
	if sub.LastSeq() != 18 {
		t.Fatalf("LastSeq = %d, want 18", sub.LastSeq())
	}
	// A cancelled wait returns the context's error and can be retried.
	other := s.Watch(s.seq)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := other.NextBatch(ctx, dst); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	emitText(t, s, 1)
	if ev, err := next(context.Background(), other); err != nil || ev.GetSeq() != 20 {
		t.Fatalf("after a cancelled wait: %v, %v", ev, err)
	}
}

// Closing the session ends its subscriptions after the closed event.
func TestNextBatchEndsAfterTheClosedEvent(t *testing.T) {
	t.Parallel()
	s := testSession(t, 16)
	sub := s.Watch(0)
	emitText(t, s, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dst := make([]*encoded.Event, 8)
	n, err := sub.NextBatch(context.Background(), dst)
	if err != nil || n != 3 || !closes(dst[2]) {
		t.Fatalf("got %d events (%v), err %v; want two and the closed event", n, dst[:n], err)
	}
	if _, err := sub.NextBatch(context.Background(), dst); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the closed event: %v, want ErrClosed", err)
	}
}

// The store follower (a session run by another replica or none) reads in
// batches too, and ends after the closed event.
func TestFollowerNextBatch(t *testing.T) {
	t.Parallel()
	s := testSession(t, 16)
	emitText(t, s, 7)
	ctx := context.Background()
	f, err := s.m.Watch(ctx, "", s.ID(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*follower); !ok {
		t.Fatalf("Watch of a session the manager does not run gave %T", f)
	}
	dst := make([]*encoded.Event, 2)
	checkRun(t, seqsOf(t, f, dst, 5), 3)
	type result struct {
		seqs []uint64
		err  error
	}
	got := make(chan result)
	go func() {
		seqs, err := collect(f, make([]*encoded.Event, 8), 3)
		got <- result{seqs, err}
	}()
	s.mu.Lock()
	err = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateReady, ""), stateEvent(statestore.StateClosed, "")}, nil)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	stored(t, s)
	emitText(t, s, 1)
	r := <-got
	if len(r.seqs) != 2 || r.seqs[0] != 8 || r.seqs[1] != 9 || !errors.Is(r.err, ErrClosed) || f.LastSeq() != 9 {
		t.Fatalf("follower: %v, err %v, LastSeq %d; want 8 and 9 (the closed event), then ErrClosed", r.seqs, r.err, f.LastSeq())
	}
}

// held counts the events the ring keeps alive.
func held(r *ring) int {
	n := 0
	slots := *r.slots.Load()
	for i := range slots {
		if slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// The ring lets go of the events every subscription has read, and the
// session lets go of the ring with its last subscription: a watched idle
// session does not keep a ring's worth of events alive.
func TestRingKeepsOnlyWhatIsStillToBeRead(t *testing.T) {
	t.Parallel()
	const buffer = 1024
	s := testSession(t, buffer)
	a, b := s.Watch(0), s.Watch(0)
	r := s.live
	dst := make([]*encoded.Event, buffer)
	emitText(t, s, 500)
	seqsOf(t, a, dst, 500)
	// b has read nothing: everything is kept for it.
	emitText(t, s, 100)
	if n := held(r); n != 600 {
		t.Fatalf("the ring holds %d events, want the 600 b has not read", n)
	}
	checkRun(t, seqsOf(t, b, dst, 600), 1)
	seqsOf(t, a, dst, 100)
	// Both read all: the next sweep lets go of it all but what came since.
	emitText(t, s, 64)
	if n := held(r); n > 64 {
		t.Fatalf("the ring holds %d events after both read all but the last 64", n)
	}
	// What is let go had been read: both go on in order.
	emitText(t, s, 10)
	checkRun(t, seqsOf(t, a, dst, 74), 601)
	checkRun(t, seqsOf(t, b, dst, 74), 601)
	a.Close()
	b.Close()
	if s.live != nil {
		t.Fatal("the session keeps its ring with no subscription")
	}
	// A subscription after that starts a new ring, live from there.
	c := s.Watch(s.seq)
	emitText(t, s, 1)
	if ev, err := next(context.Background(), c); err != nil || ev.GetSeq() != 675 {
		t.Fatalf("new subscription: %v, %v", ev, err)
	}
	c.Close()
}

// ringSize is the number of slots of the session's ring.
func ringSize(s *Session) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(*s.live.slots.Load())
}

// The ring stays small while its watchers keep up, and grows while one
// lags, up to the events it may hold: the lagging watcher then reads all
// it missed, in order, without being cut off.
func TestRingGrowsWhileAWatcherLags(t *testing.T) {
	t.Parallel()
	const buffer = 4096
	s := testSession(t, buffer)
	dst := make([]*encoded.Event, 64)
	keeps := s.Watch(0)
	for i := range 100 {
		emitText(t, s, 50)
		checkRun(t, seqsOf(t, keeps, dst, 50), uint64(50*i+1))
	}
	if n := ringSize(s); n != initialRing {
		t.Fatalf("the ring grew to %d slots with a watcher that keeps up", n)
	}
	lags := s.Watch(s.seq)
	emitText(t, s, 3000)
	checkRun(t, seqsOf(t, keeps, dst, 3000), 5001)
	if n := ringSize(s); n < 3000 || n > buffer {
		t.Fatalf("the ring has %d slots for a watcher 3000 events behind (at most %d)", n, buffer)
	}
	checkRun(t, seqsOf(t, lags, dst, 3000), 5001)
	// Past its bound, a lagging watcher is cut off as before.
	emitText(t, s, buffer+1)
	if _, err := next(context.Background(), lags); !errors.Is(err, ErrLagging) {
		t.Fatalf("a watcher more than the bound behind: %v, want ErrLagging", err)
	}
	if n := ringSize(s); n != buffer {
		t.Fatalf("the ring has %d slots, want its bound, %d", n, buffer)
	}
	keeps.Close()
}

// The ring stops growing once the events it holds reach its bytes: a
// lagging watcher is then cut off before it is WatchBuffer events behind.
func TestRingStopsGrowingAtItsBytes(t *testing.T) {
	t.Parallel()
	one := proto.Size(&acpv2.SessionEvent{Seq: 1 << 20, Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
		Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "1000"}}}}}})
	s := testSessionOf(t, Options{WatchBuffer: 1 << 16, WatchBufferBytes: 500 * (one + 16)}) // with the time
	lags := s.Watch(0)
	emitText(t, s, 2000)
	if n := ringSize(s); n > 1024 {
		t.Fatalf("the ring grew to %d slots past its bytes (about 500 events)", n)
	}
	if _, err := next(context.Background(), lags); !errors.Is(err, ErrLagging) {
		t.Fatalf("a watcher 2000 events behind a ring of about 500: %v, want ErrLagging", err)
	}
}

// Watchers reading while the ring grows under them get every event once,
// in order.
func TestRingGrowsUnderItsReaders(t *testing.T) {
	t.Parallel()
	const total = 20000
	s := testSession(t, 1<<16)
	type result struct {
		seqs []uint64
		err  error
	}
	results := make(chan result, 4)
	for range 4 {
		sub := s.Watch(0)
		go func() {
			seqs, err := collect(sub, make([]*encoded.Event, 7), total)
			results <- result{seqs, err}
		}()
	}
	for range total / 100 {
		emitText(t, s, 100)
	}
	for range 4 {
		r := <-results
		if r.err != nil || len(r.seqs) != total {
			t.Fatalf("a reader got %d events, err %v", len(r.seqs), r.err)
		}
		checkRun(t, r.seqs, 1)
	}
}

// A subscription the ring laps is cut off at once, not when its reader
// next asks: a reader stuck in one write (OnStall's writing names the
// same one throughout) is told so once the ring, and minStall events at
// the least, have gone by during it; a
// reader whose writes move on is not, and gets ErrLagging when it asks.
func TestLappedSubscriptionIsCutOffWhileItsReaderIsStuck(t *testing.T) {
	t.Parallel()
	const buffer = 64
	s := testSession(t, buffer)
	dst := make([]*encoded.Event, 8)
	stuck, moving := s.Watch(0), s.Watch(0)
	stalled := map[*Subscription]chan struct{}{stuck: make(chan struct{}), moving: make(chan struct{})}
	writes := uint64(1)
	for _, sub := range []*Subscription{stuck, moving} {
		sub.OnStall(func() uint64 {
			if sub == moving {
				writes += 2 // called with s.mu held
				return writes
			}
			return 7
		}, func() { close(stalled[sub]) })
	}
	emitText(t, s, 8)
	for _, sub := range []*Subscription{stuck, moving} {
		checkRun(t, seqsOf(t, sub, dst, 8), 1)
	}
	// Both now hold their batch, writing; the ring laps them.
	emitText(t, s, buffer+1)
	for _, sub := range []*Subscription{stuck, moving} {
		select {
		case <-sub.ended:
		default:
			t.Fatal("a subscription the ring lapped is not cut off")
		}
	}
	// A write under way while minStall events (more than the ring)
	// went by is stuck.
	emitText(t, s, minStall+buffer)
	<-stalled[stuck]
	select {
	case <-stalled[moving]:
		t.Fatal("a reader whose writes move on was told it is stuck")
	default:
	}
	// The ring stayed within its bound.
	if n := ringSize(s); n != buffer {
		t.Fatalf("the ring has %d slots, want %d", n, buffer)
	}
	for _, sub := range []*Subscription{stuck, moving} {
		if _, err := next(context.Background(), sub); !errors.Is(err, ErrLagging) || sub.LastSeq() != 8 {
			t.Fatalf("after the cut: %v, LastSeq %d; want ErrLagging after 8", err, sub.LastSeq())
		}
	}
}
