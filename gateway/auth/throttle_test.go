package auth_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"

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
	let := 0
	for i := range 1000 {
		if auth.Attempt(throttle, "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)+":1", true) == 0 {
			let++
		}
	}
	if n := auth.Addresses(throttle); n != 100 {
		t.Errorf("%d addresses tracked, want the bound, 100", n)
	}
	// The table is full of addresses that failed: they stay tracked and
	// refused, and the others share one bucket.
	if let > 100 {
		t.Errorf("%d of 1000 addresses made a failed attempt, want at most the 100 tracked and one more", let)
	}
	for _, addr := range []string{"10.0.0.99:1", "10.0.3.231:1", "203.0.113.1:1"} {
		if wait := auth.Attempt(throttle, addr, false); wait == 0 {
			t.Errorf("%s: not refused", addr)
		}
	}
	// A minute later they are all full again, and forgotten as new
	// addresses come.
	clock.Add(time.Minute)
	for i := range 1000 {
		if wait := auth.Attempt(throttle, "10.1."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)+":1", false); wait != 0 {
			t.Fatalf("a minute later, address %d: refused (%v)", i, wait)
		}
	}
	if n := auth.Addresses(throttle); n > 100 {
		t.Errorf("%d addresses tracked, over the bound", n)
	}
}

// Rotating through more addresses than the throttle tracks, or through
// the /64s of one IPv6 /48, gains no attempts.
func TestThrottleRotation(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		addr func(i int) string
		max  int
		want int
	}{
		// 100 addresses tracked, 10 attempts each, and 10 shared by the
		// rest.
		"IPv4 past the table": {func(i int) string { return "10.2." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1" }, 100, 100*10 + 10},
		// 16 times an address's attempts for the /48.
		"IPv6 /64s of one /48": {func(i int) string { return "[2001:db8:7:" + strconv.FormatInt(int64(i), 16) + "::1]:1" }, 0, 16 * 10},
	} {
		throttle := auth.NewThrottle(10, slog.New(slog.DiscardHandler))
		auth.SetClock(throttle, (&fakeClock{now: time.Unix(1000, 0)}).Now)
		if c.max > 0 {
			auth.SetMaxAddresses(throttle, c.max)
		}
		let := 0
		for range 3 {
			for i := range 101 {
				for range 10 {
					if auth.Attempt(throttle, c.addr(i), true) == 0 {
						let++
					}
				}
			}
		}
		if let != c.want {
			t.Errorf("%s: 3 rounds of 101 addresses x 10 failures: %d let through, want %d", name, let, c.want)
		}
	}
}

// A bucket in use by a call being checked is kept, and the call's end
// counts against it: the address gets no more attempts for it, however
// many other addresses came meanwhile.
func TestThrottleKeepsBucketsInUse(t *testing.T) {
	t.Parallel()
	throttle := auth.NewThrottle(5, slog.New(slog.DiscardHandler))
	auth.SetClock(throttle, (&fakeClock{now: time.Unix(1000, 0)}).Now)
	auth.SetMaxAddresses(throttle, 2)
	const addr = "192.0.2.50:1"
	first := auth.Start(throttle, addr)
	for _, other := range []string{"192.0.2.51:1", "192.0.2.52:1", "192.0.2.53:1"} {
		auth.Attempt(throttle, other, true)
	}
	second := auth.Start(throttle, addr)
	if first == nil || second == nil {
		t.Fatal("a call refused")
	}
	first(false)
	second(false)
	tried := 0
	for range 20 {
		if auth.Begin(throttle, addr) {
			tried++
		}
	}
	if tried != 5 {
		t.Errorf("%d concurrent guesses let through, want 5", tried)
	}
}

// Failures that could not be guesses cost nothing: behind a load balancer
// an issuer's outage or an expired token does not lock out every client.
func TestThrottleCountsGuessesOnly(t *testing.T) {
	t.Parallel()
	k := testKeys()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	// The issuer's keys are out of reach.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	outage, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: down.URL + "/keys"})
	if err != nil {
		t.Fatal(err)
	}
	// So are those of an issuer found by discovery.
	mux := http.NewServeMux()
	issuer := httptest.NewServer(mux)
	t.Cleanup(issuer.Close)
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q,"id_token_signing_alg_values_supported":["RS256"]}`, issuer.URL, issuer.URL+"/keys")
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	discovered, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Issuer: issuer.URL, Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	fromFile := newTestOIDC(t, auth.OIDCConfig{Audience: testAudience})
	set := func(name string, v any) func(map[string]any) {
		return func(c map[string]any) { c[name] = v }
	}
	for name, c := range map[string]struct {
		auth  auth.Authenticator
		token string
	}{
		"expired":                      {auth.Chain(tokens, fromFile), sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("exp", time.Now().Add(-time.Minute).Unix())))},
		"not valid yet":                {auth.Chain(tokens, fromFile), sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("nbf", time.Now().Add(time.Hour).Unix())))},
		"no user":                      {auth.Chain(tokens, fromFile), sign(t, jose.RS256, k.rsa, "rsa1", claims(""))},
		"keys unreachable":             {auth.Chain(tokens, outage), sign(t, jose.RS256, k.rsa, "rsa1", claims("alice"))},
		"keys unreachable, discovered": {auth.Chain(tokens, discovered), sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("iss", issuer.URL)))},
	} {
		throttle := auth.NewThrottle(1, slog.New(slog.DiscardHandler))
		h := auth.Middleware(c.auth, http.NotFoundHandler(), nil, auth.WithThrottle(throttle))
		call := func(token string) int {
			req := httptest.NewRequest(http.MethodPost, "/acp.v2.SessionService/ListSessions", nil)
			req.RemoteAddr = "192.0.2.7:1234"
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		for i := range 5 {
			if code := call(c.token); code != http.StatusUnauthorized {
				t.Fatalf("%s: call %d: HTTP %d, want 401, not throttled", name, i+1, code)
			}
		}
		// The static token still works, and a guess still counts.
		if code := call("static-token-0123456789"); code != http.StatusNotFound {
			t.Errorf("%s: then the static token: HTTP %d, want it let through", name, code)
		}
		if code := call("wrong-token-0123456789"); code != http.StatusUnauthorized {
			t.Errorf("%s: then a guess: HTTP %d, want 401", name, code)
		}
		if code := call("static-token-0123456789"); code != http.StatusTooManyRequests {
			t.Errorf("%s: after a guess: HTTP %d, want 429", name, code)
		}
	}
}

// What counts as a guess: an unknown token, a bad signature, another
// issuer or audience; not an expired token nor a missing one.
func TestCountsAsGuess(t *testing.T) {
	t.Parallel()
	k := testKeys()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	a := auth.Chain(tokens, newTestOIDC(t, auth.OIDCConfig{Audience: testAudience}))
	set := func(name string, v any) func(map[string]any) {
		return func(c map[string]any) { c[name] = v }
	}
	for name, c := range map[string]struct {
		token string
		guess bool
	}{
		"no token":        {"", false},
		"unknown token":   {"wrong-token-0123456789", true},
		"wrong key":       {sign(t, jose.RS256, k.stranger, "rsa1", claims("alice")), true},
		"unknown kid":     {sign(t, jose.RS256, k.rsa, "rsa9", claims("alice")), true},
		"wrong issuer":    {sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("iss", "https://evil.example"))), true},
		"wrong audience":  {sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("aud", "other"))), true},
		"garbage JWT":     {"a.b.c", true},
		"expired":         {sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("exp", time.Now().Add(-time.Minute).Unix()))), false},
		"expired, forged": {sign(t, jose.RS256, k.stranger, "rsa1", claims("alice", set("exp", time.Now().Add(-time.Minute).Unix()))), true},
		"not yet, forged": {sign(t, jose.RS256, k.stranger, "rsa1", claims("alice", set("nbf", time.Now().Add(time.Hour).Unix()))), true},
	} {
		_, err := a.Authenticate(t.Context(), bearer(c.token))
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if got := auth.CountsAsGuess(err); got != c.guess {
			t.Errorf("%s: counts as a guess %v, want %v (%v)", name, got, c.guess, errorText(err))
		}
	}
	// NotAGuess keeps the error's text and what it wraps.
	err := auth.NotAGuess(fmt.Errorf("%w: clocks apart", auth.ErrUnauthenticated))
	if auth.CountsAsGuess(err) || !errors.Is(err, auth.ErrUnauthenticated) || err.Error() != "unauthenticated: clocks apart" {
		t.Errorf("NotAGuess: %v", err)
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

// A refusal of an address the throttle holds back is itself held back
// (a client that sends refused requests as fast as it can, gzip bombs
// say, then costs the gateway little), up to auth.MaxHeld at once, past
// which refusals go at once; a 401 is never held. (50 concurrent bombers
// made a thousand refused requests a second, and another user's turns
// took 2.35x their time.)
func TestThrottledRefusalsAreHeldBack(t *testing.T) {
	t.Parallel()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	throttle := auth.NewThrottle(1, slog.New(slog.DiscardHandler))
	release := make(chan struct{})
	var holds atomic.Int32
	auth.SetHold(throttle, func(ctx context.Context, d time.Duration) {
		if d < time.Second {
			t.Errorf("a refusal held back %v, want a second", d)
		}
		holds.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	h := auth.Middleware(tokens, http.NotFoundHandler(), nil, auth.WithThrottle(throttle))
	call := func() int {
		req := httptest.NewRequest(http.MethodPost, "/acp.v2.SessionService/ListSessions", nil)
		req.RemoteAddr = "192.0.2.7:1234"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer wrong-token-0123456789")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := call(); code != http.StatusUnauthorized {
		t.Fatalf("first guess: HTTP %d, want 401", code)
	}
	if n := holds.Load(); n != 0 {
		t.Fatalf("a 401 was held back (%d holds)", n)
	}
	codes := make(chan int, auth.MaxHeld)
	for range auth.MaxHeld {
		go func() { codes <- call() }()
	}
	testutil.WaitFor(t, "every throttled refusal to be held", func() bool { return holds.Load() == auth.MaxHeld })
	if code := call(); code != http.StatusTooManyRequests {
		t.Fatalf("a refusal past the held ones: HTTP %d, want 429", code)
	}
	if n := holds.Load(); n != auth.MaxHeld {
		t.Fatalf("%d refusals held, want %d: the one past them waited too", n, auth.MaxHeld)
	}
	close(release)
	for range auth.MaxHeld {
		if code := <-codes; code != http.StatusTooManyRequests {
			t.Fatalf("a held refusal: HTTP %d, want 429", code)
		}
	}
}
