package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// listAs calls ListSessions with a bearer token and returns the error code
// ("" when it succeeded).
func listAs(t *testing.T, base, token string) connect.Code {
	t.Helper()
	c := acpv2connect.NewSessionServiceClient(http.DefaultClient, base)
	req := connect.NewRequest(&acpv2.ListSessionsRequest{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	_, err := c.ListSessions(context.Background(), req)
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

func TestTokenFileIsReloadedWithoutARestart(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, "tokens", "tok-old-0123456789 alice\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--auth-tokens", path, "--any-cwd")
	base := "http://" + addr
	if code := listAs(t, base, "tok-old-0123456789"); code != 0 {
		t.Fatalf("the listed token: %v", code)
	}
	if code := listAs(t, base, ""); code != connect.CodeUnauthenticated {
		t.Fatalf("no token: %v, want unauthenticated", code)
	}
	// Replace the file, as an operator rotating a token would.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("# rotated\ntok-new-0123456789 alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for listAs(t, base, "tok-new-0123456789") != 0 || listAs(t, base, "tok-old-0123456789") != connect.CodeUnauthenticated {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten token file was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopServe(t, cancel, exited)
}

// oidcIssuer makes an OIDC issuer's key, writes its JWKS file and returns
// the file and a function that signs claims with the key.
func oidcIssuer(t *testing.T) (jwksPath string, sign func(map[string]any) string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwksPath = writeTemp(t, "jwks.json", string(jwks))
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	return jwksPath, func(claims map[string]any) string {
		tok, err := jwt.Signed(signer).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
}

const testIssuer = "https://issuer.example"

func TestOIDCTokensFromALocalJWKS(t *testing.T) {
	t.Parallel()
	jwksPath, sign := oidcIssuer(t)
	now := time.Now()
	good := sign(map[string]any{"iss": testIssuer, "aud": "acp", "email": "alice@example.com", "sub": "1", "exp": now.Add(time.Hour).Unix()})
	expired := sign(map[string]any{"iss": testIssuer, "aud": "acp", "email": "alice@example.com", "sub": "1", "exp": now.Add(-time.Hour).Unix()})
	otherAud := sign(map[string]any{"iss": testIssuer, "aud": "other", "email": "alice@example.com", "sub": "1", "exp": now.Add(time.Hour).Unix()})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--oidc-issuer", testIssuer, "--oidc-audience", "acp", "--oidc-jwks-file", jwksPath, "--oidc-user-claim", "email", "--any-cwd")
	base := "http://" + addr
	for name, tc := range map[string]struct {
		token string
		want  connect.Code
	}{
		"valid": {good, 0}, "expired": {expired, connect.CodeUnauthenticated},
		"other audience": {otherAud, connect.CodeUnauthenticated}, "none": {"", connect.CodeUnauthenticated},
	} {
		if got := listAs(t, base, tc.token); got != tc.want {
			t.Errorf("%s token: code %v, want %v", name, got, tc.want)
		}
	}
	stopServe(t, cancel, exited)
}

// try reaches a gateway that wants a token, with --token-file or
// $ACP_GATEWAY_TOKEN, and runs its session in --cwd, in the user's
// workspace; without a token it fails as unauthenticated. Not parallel: it
// sets the variable.

// --oidc-any-audience is the explicit, logged opt-out of the audience check.
func TestOIDCAnyAudienceIsExplicitAndLogged(t *testing.T) {
	t.Parallel()
	jwksPath, sign := oidcIssuer(t)
	otherApp := sign(map[string]any{"iss": testIssuer, "aud": "another-application", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, logs, exited := serveLogs(t, ctx, "--oidc-issuer", testIssuer, "--oidc-any-audience", "--oidc-jwks-file", jwksPath, "--any-cwd")
	if code := listAs(t, "http://"+addr, otherApp); code != 0 {
		t.Fatalf("another application's token with --oidc-any-audience: %v", code)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"unsafe: --oidc-any-audience`) {
		t.Errorf("no warning of --oidc-any-audience:\n%s", logs)
	}
	stopServe(t, cancel, exited)
}

func TestTryTakesATokenAndACwd(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	tokens, tokenFile, cwd := writeTemp(t, "tokens", "tok-try-0123456789 bob\n"), writeTemp(t, "token", "tok-try-0123456789\n"), filepath.Join(ws, "bob", "work")
	if err := os.MkdirAll(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--auth-tokens", tokens, "--workspace-root", ws)
	defer stopServe(t, cancel, exited)
	base := "http://" + addr

	t.Setenv(tokenEnv, "")
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"try", "--url", base}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "unauthenticated") {
		t.Fatalf("try without a token: exit %d, %q; want 1, unauthenticated", code, errOut.String())
	}
	for _, how := range [][]string{{"--token-file", tokenFile}, nil} {
		if how == nil {
			t.Setenv(tokenEnv, "tok-try-0123456789")
		}
		out.Reset()
		errOut.Reset()
		args := append([]string{"try", "--json", "--url", base, "--cwd", cwd}, how...)
		if code := run(ctx, args, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"stopReason":"end_turn"`) {
			t.Fatalf("try %q: exit %d, %s\n%s", how, code, errOut.String(), out.String())
		}
	}
	c := bridge.NewClient(http.DefaultClient, base, "tok-try-0123456789")
	list, err := c.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 2 {
		t.Fatalf("bob's sessions: %v, %v; want the two that try made", list, err)
	}
	for _, s := range list.Msg.GetSessions() {
		if s.GetCwd() != cwd {
			t.Errorf("session %s runs in %q, want --cwd %q", s.GetSessionId(), s.GetCwd(), cwd)
		}
	}
}

// Wrong guesses are throttled per client address by default, and the log
// names the address of each failure; --auth-failure-limit 0, the explicit
// opt-out, is logged.
func TestGuessesAreThrottledAndLogged(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, logs, exited := serveLogs(t, ctx, "--auth-tokens", path, "--any-cwd")
	base := "http://" + addr
	// At once, as a guesser would: the refusals of a throttled address
	// are held back a second each, and one after the other they would
	// take long enough for the limit to refill.
	got := make(chan connect.Code, 300)
	for i := range 300 {
		go func() { got <- listAs(t, base, fmt.Sprintf("guess-%016d", i)) }()
	}
	codes := map[connect.Code]int{}
	for range 300 {
		codes[<-got]++
	}
	if codes[connect.CodeUnauthenticated] != 10 || codes[connect.CodeResourceExhausted] != 290 {
		t.Errorf("300 wrong guesses: %v, want 10 unauthenticated and 290 resource_exhausted", codes)
	}
	if code := listAs(t, base, "tok-alice-0123456789"); code != connect.CodeResourceExhausted {
		t.Errorf("the right token from the throttled address: %v, want resource_exhausted", code)
	}
	var failures int
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "rpc" || rec["code"] == "ok" {
			continue
		}
		failures++
		if client, _ := rec["client"].(string); !strings.HasPrefix(client, "127.0.0.1:") {
			t.Fatalf("a failed call's log line names no client address: %s", line)
		}
	}
	if failures != 301 {
		t.Errorf("%d failed calls logged, want 301", failures)
	}
	if !strings.Contains(logs.String(), `"msg":"authentication failures throttled`) || strings.Contains(logs.String(), "guess-") {
		t.Errorf("the throttling is not logged, or a guess is:\n%s", logs)
	}
	stopServe(t, cancel, exited)

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	addr, logs, exited = serveLogs(t, ctx, "--auth-tokens", path, "--any-cwd", "--auth-failure-limit", "0")
	for i := range 30 {
		if code := listAs(t, "http://"+addr, fmt.Sprintf("guess-%016d", i)); code != connect.CodeUnauthenticated {
			t.Fatalf("guess %d with --auth-failure-limit 0: %v, want unauthenticated", i, code)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"unsafe: --auth-failure-limit 0`) {
		t.Errorf("--auth-failure-limit 0 is not warned of:\n%s", logs)
	}
	stopServe(t, cancel, exited)
}

// cancelOnWrite cancels its context at the first write holding mark.
type cancelOnWrite struct {
	bytes.Buffer
	mark   string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.mark) {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// Interrupted (Ctrl-C) while its turn waits on a permission request, try
// cancels the turn: the gateway, which keeps a turn whose Prompt stream
// dropped, ends it at once rather than at the permission timeout.
func TestTryCancelsItsTurnWhenInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx)
	defer stopServe(t, cancel, exited)
	base := "http://" + addr
	tryCtx, interrupt := context.WithCancel(ctx)
	out := &cancelOnWrite{mark: `"permissionRequest"`, cancel: interrupt}
	var errOut bytes.Buffer
	if code := run(tryCtx, []string{"try", "--json", "--url", base}, out, &errOut); code == 0 || !strings.Contains(out.String(), "# interrupted: the turn was cancelled") {
		t.Fatalf("try interrupted: exit %d, %s\n%s", code, errOut.String(), out.String())
	}
	c := bridge.NewClient(http.DefaultClient, base, "")
	list, err := c.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 1 {
		t.Fatalf("sessions: %v, %v", list, err)
	}
	id := list.Msg.GetSessions()[0].GetSessionId()
	wctx, stop := context.WithTimeout(ctx, time.Minute) // the permission timeout is ten
	defer stop()
	watch, err := c.Watch(wctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	for watch.Receive() {
		if te := watch.Msg().GetEvent().GetTurnEnded(); te != nil {
			if te.GetStopReason() != "cancelled" {
				t.Errorf("the turn ended %v, want cancelled", te)
			}
			break
		}
	}
	if err := watch.Err(); err != nil {
		t.Fatalf("no turn end: %v", err)
	}
	got, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil || got.Msg.GetSession().GetTurnRunning() || len(got.Msg.GetSession().GetPendingPermissions()) != 0 {
		t.Errorf("after the cancel: %v, %v; want no turn running, nothing waiting", got, err)
	}
}
