package replica

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
)

func newSecret(t *testing.T, s string) *Secret {
	t.Helper()
	secret, err := NewSecret([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

const (
	secretA = "0123456789abcdef0123456789abcdef-a"
	secretB = "0123456789abcdef0123456789abcdef-b"
)

func TestLoadSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("\n  "+secretA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSecret(good)
	if err != nil {
		t.Fatal(err)
	}
	// The white space around it is not part of it.
	h := http.Header{}
	s.Assert(h, "http://b", "/p", "alice")
	if _, err := newSecret(t, secretA).asserted(h, "http://b", "/p"); err != nil {
		t.Errorf("the file's secret is not the one it holds: %v", err)
	}

	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("not-long-enough-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadSecret(short)
	if err == nil || !strings.Contains(err.Error(), short) || !strings.Contains(err.Error(), "22 bytes; it needs at least 32") ||
		!strings.Contains(err.Error(), "openssl rand -hex 32") || strings.Contains(err.Error(), "not-long-enough") {
		t.Errorf("a short secret: %v; want an error naming the file, the length and the fix, not the secret", err)
	}
	if _, err := LoadSecret(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// replicaServer serves s's challenges at ProofPath as the replica at the
// server's own address would.
func replicaServer(t *testing.T, s *Secret) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("POST "+ProofPath, s.Handler(srv.URL))
	return srv
}

func TestVerify(t *testing.T) {
	t.Parallel()
	a := newSecret(t, secretA)
	ctx := context.Background()

	// A replica with the secret proves it for its own address.
	srv := replicaServer(t, a)
	if err := a.Verify(ctx, srv.Client(), srv.URL); err != nil {
		t.Fatalf("a replica with the secret: %v", err)
	}
	// It proves the address its lease names, as that names it.
	for _, spelling := range []string{srv.URL + "/", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		if err := a.Verify(ctx, srv.Client(), spelling); err == nil {
			t.Errorf("a proof for %s is accepted from the replica at %s", spelling, srv.URL)
		}
	}

	// Another secret, or none, proves nothing.
	other := replicaServer(t, newSecret(t, secretB))
	none := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(none.Close)
	// A listener that relays the challenge to a real replica gets the
	// proof for that replica's address, not its own.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ProofPath, nil)
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		res.Body.Close()
		w.Header().Set(ProofHeader, res.Header.Get(ProofHeader))
		w.WriteHeader(res.StatusCode)
	}))
	t.Cleanup(relay.Close)
	// One that redirects to a real replica is not followed.
	redirect := httptest.NewServer(http.RedirectHandler(srv.URL+ProofPath, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	for name, peer := range map[string]string{"another secret": other.URL, "no secret": none.URL, "a relay": relay.URL, "a redirect": redirect.URL} {
		err := a.Verify(ctx, http.DefaultClient, peer)
		if err == nil || !strings.Contains(err.Error(), "did not prove it holds the replica secret") || errors.Is(err, ErrUnreachable) {
			t.Errorf("%s: %v, want it refused, not unreachable", name, err)
		}
	}
	// A replica that does not answer is unreachable, not refused.
	silent := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(silent.Close)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	for name, err := range map[string]error{
		"an address nothing listens on":  a.Verify(ctx, http.DefaultClient, "http://127.0.0.1:1"),
		"a replica that does not answer": a.Verify(short, http.DefaultClient, silent.URL),
	} {
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("%s: %v, want ErrUnreachable", name, err)
		}
	}
}

func TestHandlerWantsAChallenge(t *testing.T) {
	t.Parallel()
	srv := replicaServer(t, newSecret(t, secretA))
	for _, c := range []string{"", "short", strings.Repeat("x", 257)} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ProofPath, nil)
		req.Header.Set(ChallengeHeader, c)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || res.Header.Get(ProofHeader) != "" {
			t.Errorf("challenge %q: %s, proof %q", c, res.Status, res.Header.Get(ProofHeader))
		}
	}
}

// userOf authenticates h for the replica at self with a's authenticator
// over a Tokens-like next that knows one bearer token.
func userOf(a auth.Authenticator, procedure string, h http.Header) (string, error) {
	return a.Authenticate(auth.WithProcedure(context.Background(), procedure), h)
}

func TestAssertion(t *testing.T) {
	t.Parallel()
	s := newSecret(t, secretA)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	next := authFunc(func(_ context.Context, h http.Header) (string, error) {
		if h.Get("Authorization") == "Bearer good-token-0123456789" {
			return "token-user", nil
		}
		return "", auth.ErrUnauthenticated
	})
	const self, procedure = "http://10.0.0.2:8080", "/acp.v2.SessionService/Prompt"
	a := s.Authenticator(self, next)
	asserted := func(target, procedure, user string) http.Header {
		h := http.Header{}
		s.Assert(h, target, procedure, user)
		h.Set(ForwardedHeader, "1")
		return h
	}
	if user, err := userOf(a, procedure, asserted(self, procedure, "alice")); err != nil || user != "alice" {
		t.Fatalf("a good assertion: %q, %v", user, err)
	}
	// Any user name survives the header.
	odd := "bob\x00\n é/..\"x"
	if user, err := userOf(a, procedure, asserted(self, procedure, odd)); err != nil || user != odd {
		t.Errorf("an odd user name: %q, %v", user, err)
	}

	tamperedUser := asserted(self, procedure, "alice")
	parts := strings.Split(tamperedUser.Get(AssertionHeader), ".")
	parts[2] = b64.EncodeToString([]byte("mallory"))
	tamperedUser.Set(AssertionHeader, strings.Join(parts, "."))
	tamperedTime := asserted(self, procedure, "alice")
	parts = strings.Split(tamperedTime.Get(AssertionHeader), ".")
	parts[1] = "1700000030"
	tamperedTime.Set(AssertionHeader, strings.Join(parts, "."))
	otherSecret := http.Header{}
	newSecret(t, secretB).Assert(otherSecret, self, procedure, "alice")
	withToken := asserted("http://10.0.0.3:8080", procedure, "alice")
	withToken.Set("Authorization", "Bearer good-token-0123456789")
	forwardedWithToken := http.Header{}
	forwardedWithToken.Set(ForwardedHeader, "1")
	forwardedWithToken.Set("Authorization", "Bearer good-token-0123456789")

	for name, h := range map[string]http.Header{
		"for another replica":            asserted("http://10.0.0.3:8080", procedure, "alice"),
		"for another procedure":          asserted(self, "/acp.v2.SessionService/CloseSession", "alice"),
		"another user":                   tamperedUser,
		"another time":                   tamperedTime,
		"another secret":                 otherSecret,
		"malformed":                      {AssertionHeader: {"v1.x.y"}},
		"another version":                {AssertionHeader: {"v2" + strings.TrimPrefix(asserted(self, procedure, "a").Get(AssertionHeader), "v1")}},
		"a bad assertion beside a token": withToken,
		"forwarded without an assertion": forwardedWithToken,
	} {
		user, err := userOf(a, procedure, h)
		if err == nil || user != "" || !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %q, %v; want it refused", name, user, err)
		}
	}

	// A minute either way is allowed for clocks; no more.
	for d, ok := range map[time.Duration]bool{59 * time.Second: true, -59 * time.Second: true, 61 * time.Second: false, -61 * time.Second: false} {
		h := asserted(self, procedure, "alice")
		now = now.Add(d)
		_, err := userOf(a, procedure, h)
		now = now.Add(-d)
		if (err == nil) != ok {
			t.Errorf("checked %v after: %v", d, err)
		}
		if err != nil && !strings.Contains(err.Error(), "clocks") {
			t.Errorf("a stale assertion's error %q does not name the clocks", err)
		}
	}

	// Requests that are not forwarded are next's.
	plain := http.Header{}
	plain.Set("Authorization", "Bearer good-token-0123456789")
	if user, err := userOf(a, procedure, plain); err != nil || user != "token-user" {
		t.Errorf("a client's request: %q, %v", user, err)
	}
}

// An assertion refused only for its age, as when the replicas' clocks are
// apart, is no guess: it does not use up the forwarding replica's
// failed-authentication attempts, while a bad one does.
func TestStaleAssertionIsNoGuess(t *testing.T) {
	t.Parallel()
	s := newSecret(t, secretA)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	const self, procedure = "http://10.0.0.2:8080", "/acp.v2.SessionService/Prompt"
	next := authFunc(func(context.Context, http.Header) (string, error) { return "", auth.ErrUnauthenticated })
	throttle := auth.NewThrottle(1, slog.New(slog.DiscardHandler))
	h := auth.Middleware(s.Authenticator(self, next), http.NotFoundHandler(), nil, auth.WithThrottle(throttle))
	call := func(at time.Time, tamper bool) int {
		req := httptest.NewRequest(http.MethodPost, procedure, nil)
		req.RemoteAddr = "10.0.0.3:40000" // the forwarding replica
		req.Header.Set("Content-Type", "application/proto")
		asserting := newSecret(t, secretA)
		asserting.now = func() time.Time { return at }
		asserting.Assert(req.Header, self, procedure, "alice")
		if tamper {
			parts := strings.Split(req.Header.Get(AssertionHeader), ".")
			parts[2] = b64.EncodeToString([]byte("mallory"))
			req.Header.Set(AssertionHeader, strings.Join(parts, "."))
		}
		req.Header.Set(ForwardedHeader, "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range 5 {
		if code := call(now.Add(-2*time.Minute), false); code != http.StatusUnauthorized {
			t.Fatalf("a stale assertion, %d: HTTP %d, want 401, not throttled", i+1, code)
		}
	}
	if code := call(now, false); code != http.StatusNotFound {
		t.Errorf("then a good one: HTTP %d, want it let through", code)
	}
	if code := call(now, true); code != http.StatusUnauthorized {
		t.Errorf("a tampered one: HTTP %d, want 401", code)
	}
	if code := call(now, false); code != http.StatusTooManyRequests {
		t.Errorf("after a tampered one: HTTP %d, want 429", code)
	}
}

// authFunc adapts a function to auth.Authenticator.
type authFunc func(context.Context, http.Header) (string, error)

func (f authFunc) Authenticate(ctx context.Context, h http.Header) (string, error) { return f(ctx, h) }
