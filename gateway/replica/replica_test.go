package replica

import (
	"context"
	"errors"
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
		if err == nil || !strings.Contains(err.Error(), "did not prove it holds the replica secret") {
			t.Errorf("%s: %v, want it refused", name, err)
		}
	}
	if err := a.Verify(ctx, http.DefaultClient, "http://127.0.0.1:1"); err == nil {
		t.Error("an address nothing listens on: verified")
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

// authFunc adapts a function to auth.Authenticator.
type authFunc func(context.Context, http.Header) (string, error)

func (f authFunc) Authenticate(ctx context.Context, h http.Header) (string, error) { return f(ctx, h) }
