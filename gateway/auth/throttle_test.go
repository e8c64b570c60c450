package auth_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// After the limit of wrong guesses, an address is refused, its right token
// too, until its bucket refills; another address is not; a call without
// credentials costs nothing.
func TestThrottleRefusesAnAddressAfterItsFailures(t *testing.T) {
	t.Parallel()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	logs := &testutil.SyncBuffer{}
	throttle := auth.NewThrottle(3, slog.New(slog.NewTextHandler(logs, nil)))
	clock := &fakeClock{now: time.Unix(1000, 0)}
	auth.SetClock(throttle, clock.Now)
	srv := newServer(t, connect.WithInterceptors(auth.NewInterceptor(tokens, auth.WithThrottle(throttle))))

	for _, p := range protocols {
		// Each protocol's turn starts with a full bucket.
		clock.Add(time.Hour)
		client := acpv2connect.NewSessionServiceClient(srv.Client(), srv.URL, p.opt)
		list := func(authz string) error {
			req := connect.NewRequest(&acpv2.ListSessionsRequest{})
			if authz != "" {
				req.Header().Set("Authorization", authz)
			}
			_, err := client.ListSessions(t.Context(), req)
			return err
		}
		for range 5 {
			if err := list(""); connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("%s: no token: %v, want unauthenticated", p.name, err)
			}
		}
		for i := range 3 {
			if err := list("Bearer wrong-token-0123456789"); connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("%s: wrong guess %d: %v, want unauthenticated", p.name, i+1, err)
			}
		}
		for _, authz := range []string{"Bearer wrong-token-0123456789", "Bearer static-token-0123456789", ""} {
			err := list(authz)
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeResourceExhausted || !strings.Contains(cerr.Message(), "retry in 20s") {
				t.Fatalf("%s: %q after 3 wrong guesses: %v, want resource_exhausted saying retry in 20s", p.name, authz, err)
			}
		}
		// Watch, a stream, is refused too.
		stream, err := client.Watch(t.Context(), connect.NewRequest(&acpv2.WatchRequest{SessionId: "s"}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("%s: Watch of a throttled address: %v", p.name, err)
		}
		// One attempt comes back every 20 s.
		clock.Add(20 * time.Second)
		if err := list("Bearer static-token-0123456789"); err != nil {
			t.Fatalf("%s: the right token 20s later: %v", p.name, err)
		}
		if err := list("Bearer static-token-0123456789"); err != nil {
			t.Fatalf("%s: a success costs nothing: %v", p.name, err)
		}
		if err := list("Bearer wrong-token-0123456789"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("%s: a guess 20s later: %v, want unauthenticated", p.name, err)
		}
		if err := list("Bearer static-token-0123456789"); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("%s: after that guess: %v, want resource_exhausted", p.name, err)
		}
	}
	if !strings.Contains(logs.String(), "authentication failures throttled") || !strings.Contains(logs.String(), "client=127.0.0.1") {
		t.Errorf("the throttling is not logged with the client's address:\n%s", logs)
	}
	if strings.Contains(logs.String(), "token-0123456789") {
		t.Errorf("the log shows a token:\n%s", logs)
	}
}

// Addresses count alone, but an IPv6 /64 counts as one; the table of
// addresses stays bounded.
func TestThrottleAddresses(t *testing.T) {
	t.Parallel()
	throttle := auth.NewThrottle(1, slog.New(slog.DiscardHandler))
	clock := &fakeClock{now: time.Unix(1000, 0)}
	auth.SetClock(throttle, clock.Now)
	for _, addr := range []string{"192.0.2.1:1000", "[2001:db8:1:2::1]:1000", "[::ffff:198.51.100.7]:1"} {
		if wait := auth.Attempt(throttle, addr, true); wait != 0 {
			t.Fatalf("%s: first failure refused (%v)", addr, wait)
		}
	}
	for addr, want := range map[string]bool{
		"192.0.2.1:2000":             true,  // the same host, another port
		"192.0.2.2:1000":             false, // another host
		"[2001:db8:1:2::ffff]:1":     true,  // the same /64
		"[2001:db8:1:3::1]:1":        false, // another /64
		"198.51.100.7:5":             true,  // the same IPv4 address, not mapped
		"[::ffff:198.51.100.8]:1000": false,
	} {
		if refused := auth.Attempt(throttle, addr, false) > 0; refused != want {
			t.Errorf("%s: refused %v, want %v", addr, refused, want)
		}
	}
	clock.Add(time.Minute)
	if wait := auth.Attempt(throttle, "192.0.2.1:1000", true); wait != 0 {
		t.Errorf("a minute later: refused (%v)", wait)
	}

	auth.SetMaxAddresses(throttle, 100)
	for i := range 1000 {
		auth.Attempt(throttle, "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)+":1", true)
	}
	if n := auth.Addresses(throttle); n != 100 {
		t.Errorf("%d addresses remembered, want the bound, 100", n)
	}
	// The most recent are remembered.
	if wait := auth.Attempt(throttle, "10.0.3.231:1", false); wait == 0 {
		t.Error("the last address seen was forgotten")
	}
}

// Concurrent guesses from one address get no more tries than its bucket
// holds.
func TestThrottleConcurrentGuesses(t *testing.T) {
	t.Parallel()
	throttle := auth.NewThrottle(5, slog.New(slog.DiscardHandler))
	auth.SetClock(throttle, (&fakeClock{now: time.Unix(1000, 0)}).Now)
	var tried int
	for range 20 {
		// Begun, not yet ended: each counts against the bucket.
		if auth.Begin(throttle, "192.0.2.9:1") {
			tried++
		}
	}
	if tried != 5 {
		t.Errorf("%d concurrent guesses let through, want 5", tried)
	}
}
