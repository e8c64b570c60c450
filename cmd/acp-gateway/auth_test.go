package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

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
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("tok-old alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--auth-tokens", path)
	base := "http://" + addr
	if code := listAs(t, base, "tok-old"); code != 0 {
		t.Fatalf("the listed token: %v", code)
	}
	if code := listAs(t, base, ""); code != connect.CodeUnauthenticated {
		t.Fatalf("no token: %v, want unauthenticated", code)
	}
	// Replace the file, as an operator rotating a token would.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("# rotated\ntok-new alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for listAs(t, base, "tok-new") != 0 || listAs(t, base, "tok-old") != connect.CodeUnauthenticated {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten token file was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopServe(t, cancel, exited)
}

func TestOIDCTokensFromALocalJWKS(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwksPath := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksPath, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	const issuer = "https://issuer.example"
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(claims map[string]any) string {
		tok, err := jwt.Signed(signer).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	good := sign(map[string]any{"iss": issuer, "aud": "acp", "email": "alice@example.com", "sub": "1", "exp": now.Add(time.Hour).Unix()})
	expired := sign(map[string]any{"iss": issuer, "aud": "acp", "email": "alice@example.com", "sub": "1", "exp": now.Add(-time.Hour).Unix()})
	otherAud := sign(map[string]any{"iss": issuer, "aud": "other", "email": "alice@example.com", "sub": "1", "exp": now.Add(time.Hour).Unix()})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--oidc-issuer", issuer, "--oidc-audience", "acp", "--oidc-jwks-file", jwksPath, "--oidc-user-claim", "email")
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
