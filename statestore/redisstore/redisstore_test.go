package redisstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// fresh opens a store under a prefix of its own, whose keys are deleted
// when the test ends.
func fresh(t testing.TB, opts Options) *Store {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	opts.Prefix = "acpgw-test:" + hex.EncodeToString(b[:]) + ":"
	s := openTest(t, opts, nil)
	t.Cleanup(func() { deleteKeys(t, opts.Prefix) })
	return s
}

// reachable says once whether the test Redis answers, quickly, so that
// without one every test fails at once rather than after retrying.
var reachable = sync.OnceValue(func() error {
	o, err := redis.ParseURL(testutil.RedisURL())
	if err != nil {
		return err
	}
	o.MaxRetries = -1
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
})

// openTest opens a store on the test Redis, closed when the test ends.
func openTest(t testing.TB, opts Options, tweak func(*redis.Options)) *Store {
	t.Helper()
	testutil.Needs(t, "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := reachable()
	var s *Store
	if err == nil {
		s, err = open(ctx, testutil.RedisURL(), opts, tweak)
	}
	if err != nil {
		shown, _, _ := ParseURL(testutil.RedisURL())
		t.Fatalf("the tests need the Redis at %s: start one (redis-server --port 6379) or set ACP_GATEWAY_TEST_REDIS to its URL: %v", shown, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// admin returns a plain client on the test Redis, closed when the test ends.
func admin(t testing.TB) *redis.Client {
	t.Helper()
	testutil.Needs(t, "redis")
	o, err := redis.ParseURL(testutil.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// deleteKeys deletes every key that starts with prefix.
func deleteKeys(t testing.TB, prefix string) {
	ctx := context.Background()
	o, err := redis.ParseURL(testutil.RedisURL())
	if err != nil {
		t.Error(err)
		return
	}
	c := redis.NewClient(o)
	defer c.Close()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan the test keys: %v", err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("delete the test keys: %v", err)
			return
		}
		keys = keys[n:]
	}
}

func contractOpener(t *testing.T, opts statestore.Options) statestore.Store {
	return fresh(t, Options{Options: opts})
}

// secondReplica opens another store on s's Redis and prefix.
func secondReplica(t *testing.T, s statestore.Store) statestore.Store {
	first := s.(*Store)
	return openTest(t, Options{Options: first.opts, Prefix: first.prefix}, nil)
}

func TestContract(t *testing.T) { storetest.Run(t, contractOpener) }

func TestShared(t *testing.T) { storetest.RunShared(t, contractOpener, secondReplica) }

func TestDurable(t *testing.T) {
	storetest.RunDurable(t, contractOpener, func(t *testing.T, s statestore.Store) statestore.Store {
		second := secondReplica(t, s)
		s.Close()
		return second
	})
}

func newSession(id, owner string) *statestore.Session {
	return &statestore.Session{ID: id, Owner: owner, Agent: "demo", Cwd: "/w", State: statestore.StateReady, CreatedAt: time.Now()}
}

func create(t testing.TB, s *Store, id, owner string) {
	t.Helper()
	if err := s.CreateSession(context.Background(), newSession(id, owner)); err != nil {
		t.Fatal(err)
	}
}

func appendOne(t testing.TB, s *Store, id string, seq uint64, calls ...*acpv2.ToolCall) {
	t.Helper()
	if err := s.Append(context.Background(), id, storetest.Encode(t, storetest.Event(seq, fmt.Sprint("e", seq))), storetest.Calls(t, calls...)); err != nil {
		t.Fatalf("append seq %d: %v", seq, err)
	}
}

// checkTTLs checks that each of id's data keys lives for up to limit, or
// forever when limit is 0.
func checkTTLs(t *testing.T, s *Store, id, what string, limit time.Duration) {
	t.Helper()
	for _, k := range s.keys(id).data() {
		d, err := s.rdb.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if limit == 0 && d != -1 || limit > 0 && (d <= 0 || d > limit) {
			t.Fatalf("%s: %s has ttl %v, want up to %v (0: none)", what, strings.TrimPrefix(k, s.prefix), d, limit)
		}
	}
}

func setState(t *testing.T, s *Store, id string, state statestore.State) {
	t.Helper()
	if err := s.SetState(context.Background(), id, state, "test"); err != nil {
		t.Fatal(err)
	}
}

func TestEndedTTL(t *testing.T) {
	s := fresh(t, Options{EndedTTL: time.Hour})
	create(t, s, "a", "alice")
	appendOne(t, s, "a", 1, &acpv2.ToolCall{ToolCallId: "c1"})
	checkTTLs(t, s, "a", "open session", 0)
	setState(t, s, "a", statestore.StateClosed)
	// An append after the close, with a call that makes tc and tco grow,
	// keeps them on the same clock.
	appendOne(t, s, "a", 2, &acpv2.ToolCall{ToolCallId: "c2"})
	checkTTLs(t, s, "a", "closed session", time.Hour)
	// A session whose keys only come to be after the close.
	create(t, s, "b", "alice")
	setState(t, s, "b", statestore.StateClosed)
	appendOne(t, s, "b", 1, &acpv2.ToolCall{ToolCallId: "c1"})
	checkTTLs(t, s, "b", "session filled after its close", time.Hour)
	// Reopened, it is kept again.
	setState(t, s, "a", statestore.StateReady)
	checkTTLs(t, s, "a", "reopened session", 0)

	forever := fresh(t, Options{EndedTTL: -1})
	create(t, forever, "a", "")
	appendOne(t, forever, "a", 1, &acpv2.ToolCall{ToolCallId: "c1"})
	setState(t, forever, "a", statestore.StateClosed)
	checkTTLs(t, forever, "a", "EndedTTL < 0", 0)
}

func TestExpiredSessionsLeaveTheLists(t *testing.T) {
	ctx := context.Background()
	s := fresh(t, Options{EndedTTL: 100 * time.Millisecond})
	for _, id := range []string{"a", "b", "c"} {
		create(t, s, id, "alice")
		appendOne(t, s, id, 1)
	}
	setState(t, s, "b", statestore.StateClosed)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.GetSession(ctx, "b"); errors.Is(err, statestore.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed session did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, owner := range []string{"", "alice"} {
		list, err := s.ListSessions(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].ID != "a" || list[1].ID != "c" {
			t.Fatalf("ListSessions(%q) = %v", owner, list)
		}
	}
	for _, index := range []string{s.allKey(), s.ownerKey("alice")} {
		if err := s.rdb.ZScore(ctx, index, "b").Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("%s still lists the expired session: %v", index, err)
		}
	}
	if n, err := s.rdb.Exists(ctx, s.keys("b").data()...).Result(); err != nil || n != 0 {
		t.Errorf("%d keys of the expired session left, %v", n, err)
	}
}

// TestClientKill drops every connection to Redis, again and again, while a
// writer appends and a watcher follows on another replica: no event is
// lost or stored twice.
//
// A kill that lands while go-redis sets up a new connection (its SELECT)
// makes that setup retry on the dead connection until MaxRetries runs out,
// about ten seconds; hence the generous deadlines.
func TestClientKill(t *testing.T) {
	ctx := context.Background()
	s := fresh(t, Options{})
	watcher := openTest(t, Options{Prefix: s.prefix}, nil)
	killer := admin(t)
	create(t, s, "a", "")
	const n = 1000

	followed := make(chan error, 1)
	go func() {
		var after uint64
		for after < n {
			if err := watcher.WaitEvents(ctx, "a", after); err != nil {
				followed <- err
				return
			}
			evs, err := watcher.Events(ctx, "a", after, 0)
			if err != nil {
				followed <- err
				return
			}
			for _, e := range evs {
				if e.Seq() != after+1 {
					followed <- fmt.Errorf("watcher read seq %d after %d", e.Seq(), after)
					return
				}
				after++
			}
		}
		followed <- nil
	}()

	stop := make(chan struct{})
	var killed, kills atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			k, err := killer.ClientKillByFilter(ctx, "TYPE", "normal").Result()
			if err != nil {
				t.Errorf("CLIENT KILL: %v", err)
				return
			}
			kills.Add(1)
			killed.Add(k)
		}
	})
	failures := 0
	var slowest time.Duration
	for seq := uint64(1); seq <= n; seq++ {
		batch := []*acpv2.SessionEvent{storetest.Event(seq, fmt.Sprint("e", seq))}
		calls := []*acpv2.ToolCall{{ToolCallId: fmt.Sprint("c", seq%5), Title: fmt.Sprint(seq)}}
		t0 := time.Now()
		err := s.Append(ctx, "a", storetest.Encode(t, batch...), storetest.Calls(t, calls...))
		slowest = max(slowest, time.Since(t0))
		// A writer that is told an append failed tries it again.
		for try := 0; err != nil && try < 5; try++ {
			failures++
			t.Logf("append seq %d: %v", seq, err)
			err = s.Append(ctx, "a", storetest.Encode(t, batch...), storetest.Calls(t, calls...))
		}
		if err != nil {
			t.Fatalf("append seq %d: %v", seq, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d CLIENT KILLs dropped %d connections; %d appends reported an error; the slowest took %v",
		kills.Load(), killed.Load(), failures, slowest)
	if killed.Load() == 0 {
		t.Fatal("CLIENT KILL dropped no connection")
	}
	if failures > 0 {
		t.Errorf("%d appends failed although the client retries", failures)
	}

	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("%d events stored, want %d", len(got), n)
	}
	for i, e := range got {
		if e.Seq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq())
		}
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatalf("watcher: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not see every event")
	}
}

func TestIdempotentRetry(t *testing.T) {
	ctx := context.Background()
	s := fresh(t, Options{})
	create(t, s, "a", "")
	batch := []*acpv2.SessionEvent{storetest.Event(1, "x"), storetest.Event(2, "y")}
	call := []*acpv2.ToolCall{{ToolCallId: "c", Status: "pending"}}
	for range 2 {
		if err := s.Append(ctx, "a", storetest.Encode(t, batch...), storetest.Calls(t, call...)); err != nil {
			t.Fatal(err)
		}
	}
	appendOne(t, s, "a", 3)
	// Still recognised once the log has moved on.
	if err := s.Append(ctx, "a", storetest.Encode(t, batch...), storetest.Calls(t, call...)); err != nil {
		t.Fatalf("repeat of a stored batch: %v", err)
	}
	for name, b := range map[string][]*acpv2.SessionEvent{
		"other bytes":      {storetest.Event(1, "x"), storetest.Event(2, "z")},
		"part of the log":  {storetest.Event(3, "e3"), storetest.Event(4, "new")},
		"not yet appended": {storetest.Event(5, "e5")},
	} {
		if err := s.Append(ctx, "a", storetest.Encode(t, b...), nil); !errors.Is(err, statestore.ErrSeqConflict) {
			t.Errorf("%s: err = %v, want ErrSeqConflict", name, err)
		}
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("Events = %d, %v; want 3", len(got), err)
	}
	calls, asOf, err := s.ToolCalls(ctx, "a")
	if err != nil || len(calls) != 1 || asOf != 3 {
		t.Fatalf("ToolCalls = %v as of %d, %v", calls, asOf, err)
	}

	// Events dropped by retention cannot be compared.
	short := fresh(t, Options{Options: statestore.Options{MaxEvents: 2}})
	create(t, short, "a", "")
	for seq := uint64(1); seq <= 4; seq++ {
		appendOne(t, short, "a", seq)
	}
	if err := short.Append(ctx, "a", storetest.Encode(t, storetest.Event(1, "e1")), nil); !errors.Is(err, statestore.ErrSeqConflict) {
		t.Errorf("repeat of a trimmed event: err = %v, want ErrSeqConflict", err)
	}
	if err := short.Append(ctx, "a", storetest.Encode(t, storetest.Event(4, "e4")), nil); err != nil {
		t.Errorf("repeat of a kept event: %v", err)
	}
}

// replyDropper loses the reply to the next EVALSHA once armed: Redis runs
// the script, the client sees its connection break and retries.
type replyDropper struct {
	armed   atomic.Bool
	dropped atomic.Int32
}

func (d *replyDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

type dropConn struct {
	net.Conn
	d    *replyDropper
	drop bool
}

func (c *dropConn) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && c.d.armed.CompareAndSwap(true, false) {
		c.drop = true
	}
	return c.Conn.Write(p)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if !c.drop {
		return c.Conn.Read(p)
	}
	// Wait for the reply, so the script surely ran, then lose it.
	c.drop = false
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Conn.Read(make([]byte, 1024)) // whatever came, or nothing: the connection is dropped next
	c.Close()
	c.d.dropped.Add(1)
	return 0, io.EOF
}

func TestRetryAfterLostReply(t *testing.T) {
	ctx := context.Background()
	prefixed := fresh(t, Options{})
	d := &replyDropper{}
	s := openTest(t, Options{Prefix: prefixed.prefix}, func(o *redis.Options) { o.Dialer = d.dial })
	create(t, s, "a", "")
	appendOne(t, s, "a", 1)
	d.armed.Store(true)
	if err := s.Append(ctx, "a", storetest.Encode(t, storetest.Event(2, "e2"), storetest.Event(3, "e3")), storetest.Calls(t, &acpv2.ToolCall{ToolCallId: "c"})); err != nil {
		t.Fatalf("append whose reply was lost: %v", err)
	}
	if d.dropped.Load() != 1 {
		t.Fatalf("%d replies dropped, want 1", d.dropped.Load())
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Seq() != 2 || got[2].Seq() != 3 {
		t.Fatalf("Events = %v", got)
	}
	appendOne(t, s, "a", 4)
}

func TestWaitCancel(t *testing.T) {
	s := fresh(t, Options{})
	create(t, s, "a", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(ctx, "a", 0) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := storetest.Await(t, done, 2*time.Second, "WaitEvents did not return after the cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestManyWaiters has more watchers than wait connections: other
// operations go on, and every watcher wakes.
func TestManyWaiters(t *testing.T) {
	ctx := context.Background()
	s := fresh(t, Options{WaitConns: 4})
	create(t, s, "a", "")
	const watchers = 40
	done := make(chan error, watchers)
	for range watchers {
		go func() { done <- s.WaitEvents(ctx, "a", 0) }()
	}
	time.Sleep(200 * time.Millisecond)
	for i := range 20 {
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.GetSession(short, "a")
		cancel()
		if err != nil {
			t.Fatalf("GetSession %d while watchers wait: %v", i, err)
		}
	}
	appendOne(t, s, "a", 1)
	timeout := time.After(15 * time.Second)
	for range watchers {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("not every watcher woke")
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, "http://127.0.0.1:6379/9", Options{}); err == nil || !strings.Contains(err.Error(), `scheme "http"`) {
		t.Errorf("http URL: err = %v", err)
	}
	_, err := Open(ctx, "redis://user:secret@127.0.0.1:1/0?max_retries=-1", Options{})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "secret") {
		t.Errorf("unreachable Redis: err = %v, want one naming the URL without its password", err)
	}
}

func TestLeaseArguments(t *testing.T) {
	ctx := context.Background()
	s := fresh(t, Options{})
	if err := s.AcquireLease(ctx, "a", "", time.Second); err == nil {
		t.Error("empty holder accepted")
	}
	if err := s.AcquireLease(ctx, "a", "r", 0); err == nil {
		t.Error("zero ttl accepted")
	}
	if err := s.AcquireLease(ctx, "a", "r1", time.Minute); err != nil {
		t.Fatal(err)
	}
	err := s.AcquireLease(ctx, "a", "r2", time.Minute)
	if !errors.Is(err, statestore.ErrLeaseHeld) || !strings.Contains(err.Error(), "r1") {
		t.Errorf("err = %v, want ErrLeaseHeld naming r1", err)
	}
}

const benchText = 500

// benchAppend appends events from 1 on to session id until more says stop.
func benchAppend(b *testing.B, s *Store, id string, more func() bool) {
	ctx := context.Background()
	text := strings.Repeat("x", benchText)
	for seq := uint64(1); more(); seq++ {
		ev := []*acpv2.SessionEvent{storetest.Event(seq, text)}
		calls := []*acpv2.ToolCall{{ToolCallId: fmt.Sprint("call", seq%8), Title: "run tests", Status: "in_progress"}}
		if err := s.Append(ctx, id, storetest.Encode(b, ev...), storetest.Calls(b, calls...)); err != nil {
			b.Error(err)
			return
		}
	}
}

// BenchmarkAppend appends to one session, an event of about 500 bytes and
// a changed tool call at a time.
func BenchmarkAppend(b *testing.B) {
	s := fresh(b, Options{})
	create(b, s, "a", "")
	benchAppend(b, s, "a", b.Loop)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendParallel appends to a session per goroutine, eight
// goroutines per CPU, as a gateway's many sessions would.
func BenchmarkAppendParallel(b *testing.B) {
	s := fresh(b, Options{})
	var n atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprint("s", n.Add(1))
		if err := s.CreateSession(context.Background(), newSession(id, "")); err != nil {
			b.Error(err)
			return
		}
		benchAppend(b, s, id, pb.Next)
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// Ping answers while Redis does, and fails once it is out of reach.
func TestPing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var conns []net.Conn
	down := false
	s := openTest(t, Options{}, func(o *redis.Options) {
		o.MaxRetries = 1
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return nil, errors.New("Redis is out of reach")
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				conns = append(conns, c)
			}
			return c, err
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	mu.Lock()
	down = true
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded with Redis out of reach")
	}
}

// A record without the count of its events' bytes (written before it was
// kept) has it counted at its next append, and the byte cap holds from
// there. The count reads the log a page (256 events) at a time.
func TestEventBytesCountedForOldRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, n := range []int{10, 256, 600} {
		old := fresh(t, Options{})
		if err := old.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
			t.Fatal(err)
		}
		storetest.AppendSized(t, old, "a", 1, uint64(n))
		if err := admin(t).HDel(ctx, old.keys("a").rec, "bytes").Err(); err != nil {
			t.Fatal(err)
		}
		// Room for events 7 to n+1 (an event's seq is a varint: later
		// ones are longer).
		room := int64(0)
		for seq := 7; seq <= n+1; seq++ {
			room += int64(proto.Size(storetest.SizedEvent(uint64(seq))))
		}
		capped := openTest(t, Options{Options: statestore.Options{MaxEventBytes: room}, Prefix: old.prefix}, nil)
		storetest.AppendSized(t, capped, "a", uint64(n+1), uint64(n+1))
		storetest.CheckKept(t, capped, "a", 6, uint64(n+1), fmt.Sprintf("%d old events: the newest %d kept", n, n-5))
	}
}

// A Redis that lost its data (here, the store's keys deleted, as a
// restart without persistence or a FLUSHALL leaves it) fails Ping with
// ErrDataLost until the store accepts the loss.
func TestPingNoticesALoss(t *testing.T) {
	testutil.Needs(t, "redis")
	prefix := "acpgw-test-epoch-" + rand.Text() + ":"
	t.Cleanup(func() { deleteKeys(t, prefix) })
	s := openTest(t, Options{Prefix: prefix}, nil)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a store that lost nothing: %v", err)
	}
	deleteKeys(t, prefix)
	if err := s.Ping(ctx); !errors.Is(err, statestore.ErrDataLost) {
		t.Fatalf("Ping after the data was lost: %v, want ErrDataLost", err)
	}
	// Another store opened since trusts what it finds, and sets a new
	// epoch, which does not make the first trust it.
	other := openTest(t, Options{Prefix: prefix}, nil)
	if err := other.Ping(ctx); err != nil {
		t.Fatalf("Ping of a store opened after the loss: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, statestore.ErrDataLost) {
		t.Fatalf("Ping after a new epoch was set: %v, want ErrDataLost", err)
	}
	if err := s.AcceptLoss(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after AcceptLoss: %v", err)
	}
}
