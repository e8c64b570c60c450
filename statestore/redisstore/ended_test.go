package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// privateRedis starts a redis-server of the test's own on a free port,
// without persistence, stopped when the test ends, and returns its URL:
// its statistics count this test's commands alone.
func privateRedis(t testing.TB) string {
	t.Helper()
	testutil.Needs(t, "redis-server")
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the test needs redis-server on PATH: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	o, _ := redis.ParseURL(url)
	o.MaxRetries = -1
	c := redis.NewClient(o)
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d does not answer", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return url
}

// work is what Redis did for a span of a test: the calls of each command
// (scripts' commands included) and the key lookups (keyspace hits and
// misses).
type work struct {
	calls   map[string]int
	lookups int
}

// redisWork reads INFO since the last CONFIG RESETSTAT.
func redisWork(t testing.TB, c *redis.Client) work {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	w := work{calls: map[string]int{}}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, rest, ok := strings.Cut(line, ":"); ok {
			switch {
			case strings.HasPrefix(name, "cmdstat_"):
				// cmdstat_zadd:calls=1,usec=...
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				n, _ := strconv.Atoi(calls)
				w.calls[strings.TrimPrefix(name, "cmdstat_")] = n
			case name == "keyspace_hits" || name == "keyspace_misses":
				n, _ := strconv.Atoi(rest)
				w.lookups += n
			}
		}
	}
	// The statistics' own commands.
	delete(w.calls, "info")
	delete(w.calls, "config|resetstat")
	return w
}

// Closing a session costs Redis the same work whatever the number of
// sessions closed before it: counted in commands run (those of the
// script included) and keys looked up, with 10 and with 1,000 ended
// sessions, both when the close stays under MaxEndedSessions and when it
// deletes the session that closed first. (The gateway used to list every
// session at every close: 1,000 more records read at 1,000 ended.)
func TestCloseCostDoesNotGrowWithEndedSessions(t *testing.T) {
	t.Parallel()
	url := privateRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(func() *redis.Options { o, _ := redis.ParseURL(url); return o }())
	t.Cleanup(func() { admin.Close() })
	// closeCost closes n sessions, then one more, and returns what that
	// last close cost.
	closeCost := func(n, limit int) work {
		s, err := Open(ctx, url, Options{Options: statestore.Options{MaxEndedSessions: limit}, Prefix: fmt.Sprintf("n%d-%d:", n, limit)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range n + 1 {
			id := fmt.Sprint("s", i)
			create(t, s, id, "alice")
			appendOne(t, s, id, 1)
			if i < n {
				setState(t, s, id, statestore.StateClosed)
			}
		}
		// Warm: the script is cached, as it is in a running gateway.
		if err := setStateScript.Load(ctx, s.rdb).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		setState(t, s, fmt.Sprint("s", n), statestore.StateClosed)
		w := redisWork(t, admin)
		if got, err := s.rdb.ZCard(ctx, s.endedKey()).Result(); err != nil || limit > 0 && int(got) != min(n+1, limit) {
			t.Fatalf("%d ended sessions, cap %d: the ended set holds %d, %v", n+1, limit, got, err)
		}
		return w
	}
	for _, c := range []struct {
		what  string
		limit func(n int) int
	}{
		{"under the cap", func(n int) int { return 2 * n }},
		{"at the cap", func(n int) int { return n }},
	} {
		few, many := closeCost(10, c.limit(10)), closeCost(1000, c.limit(1000))
		t.Logf("%s: %d commands %v, %d key lookups", c.what, total(few.calls), few.calls, few.lookups)
		if !maps.Equal(few.calls, many.calls) || few.lookups != many.lookups {
			t.Errorf("%s: a close after 10 ended sessions ran %v with %d key lookups, after 1,000: %v with %d",
				c.what, few.calls, few.lookups, many.calls, many.lookups)
		}
		if n := total(few.calls); n > 30 {
			t.Errorf("%s: a close ran %d commands: %v", c.what, n, few.calls)
		}
	}
}

func total(calls map[string]int) int {
	n := 0
	for _, v := range calls {
		n += v
	}
	return n
}

// A Redis written by a gateway that did not keep the ended set holds
// closed sessions that are in no set: Open enters them, by when they
// closed (a record without StateChangedAt by CreatedAt), and holds them to
// the cap from then on, the first closed deleted first.
func TestEndedSessionsOfAnEarlierVersionAdopted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := fresh(t, Options{})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Created a, b, c, d, e, open; closed c, a, e, b (b's record from
	// before StateChangedAt was kept: it closes by its CreatedAt, first).
	for i, id := range []string{"a", "b", "c", "d", "e", "open"} {
		rec := newSession(id, "alice")
		rec.CreatedAt = base.Add(time.Duration(i) * time.Minute)
		if err := old.CreateSession(ctx, rec); err != nil {
			t.Fatal(err)
		}
		appendOne(t, old, id, 1)
	}
	rdb := admin(t)
	closedAt := map[string]time.Time{"c": base.Add(time.Hour), "a": base.Add(2 * time.Hour), "e": base.Add(3 * time.Hour)}
	for _, id := range []string{"a", "b", "c", "e"} {
		fields := []any{fState, string(statestore.StateClosed)}
		if at, ok := closedAt[id]; ok {
			fields = append(fields, fChanged, at.Format(time.RFC3339Nano))
		}
		if err := rdb.HSet(ctx, old.keys(id).rec, fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := openTest(t, Options{Options: statestore.Options{MaxEndedSessions: 3}, Prefix: old.prefix}, nil)
	want := func(what string, closed ...string) {
		t.Helper()
		list, err := s.ListSessions(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range list {
			if r.State == statestore.StateClosed {
				got = append(got, r.ID)
			}
		}
		if !slices.Equal(got, closed) {
			t.Fatalf("%s: closed sessions %v, want %v", what, got, closed)
		}
	}
	want("opened", "a", "c", "e")
	if _, err := s.GetSession(ctx, "b"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("b, closed first: %v, want ErrNotFound", err)
	}
	setState(t, s, "d", statestore.StateClosed)
	want("d closed", "a", "d", "e")
	// Opened again, nothing changes; with a lower cap, it is held to it.
	again := openTest(t, Options{Options: statestore.Options{MaxEndedSessions: 3}, Prefix: old.prefix}, nil)
	want("opened again", "a", "d", "e")
	lower := openTest(t, Options{Options: statestore.Options{MaxEndedSessions: 1}, Prefix: old.prefix}, nil)
	_, _ = again, lower
	want("opened with a cap of 1", "d")
}

// The ended set does not keep the ids of sessions whose keys expired
// (EndedTTL), even with no cap: each close drops such ids at its low end.
// An id taken again by a new session is not taken for the old one's.
func TestExpiredSessionsLeaveTheEndedSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fresh(t, Options{EndedTTL: 50 * time.Millisecond})
	for _, id := range []string{"a", "b", "c"} {
		create(t, s, id, "")
		setState(t, s, id, statestore.StateClosed)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := s.rdb.Exists(ctx, s.keys("a").rec, s.keys("b").rec, s.keys("c").rec).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed sessions did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// a comes back, open, as a new session; b and c stay gone.
	create(t, s, "a", "")
	capped := openTest(t, Options{Options: statestore.Options{MaxEndedSessions: 1}, EndedTTL: -1, Prefix: s.prefix}, nil)
	create(t, capped, "d", "")
	setState(t, capped, "d", statestore.StateClosed)
	if got, err := s.rdb.ZRange(ctx, s.endedKey(), 0, -1).Result(); err != nil || !slices.Equal(got, []string{"d"}) {
		t.Fatalf("the ended set holds %v, %v; want [d]", got, err)
	}
	if rec, err := capped.GetSession(ctx, "a"); err != nil || rec.State != statestore.StateReady {
		t.Fatalf("a, created again and open: %+v, %v", rec, err)
	}
}
