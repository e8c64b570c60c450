package auth_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
)

// newTestOIDC returns an OIDC authenticator trusting the test JWKS file,
// with cfg's other fields filled from the test issuer and audience.
func newTestOIDC(t *testing.T, cfg auth.OIDCConfig) *auth.OIDC {
	t.Helper()
	cfg.Issuer = testIssuer
	cfg.JWKSFile = writeFile(t, string(jwksJSON(t)))
	o, err := auth.NewOIDC(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// unsigned returns a JWT with the "none" algorithm and no signature.
func unsigned(t *testing.T, kid string, c map[string]any) string {
	t.Helper()
	header, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	payload, _ := json.Marshal(c)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(header) + "." + enc(payload) + "."
}

func TestOIDC(t *testing.T) {
	t.Parallel()
	k := testKeys()
	withAudience := newTestOIDC(t, auth.OIDCConfig{Audience: testAudience})
	anyAudience := newTestOIDC(t, auth.OIDCConfig{AnyAudience: true})
	byEmail := newTestOIDC(t, auth.OIDCConfig{Audience: testAudience, UserClaim: "email"})

	set := func(name string, v any) func(map[string]any) {
		return func(c map[string]any) { c[name] = v }
	}
	del := func(name string) func(map[string]any) {
		return func(c map[string]any) { delete(c, name) }
	}
	pubDER, err := x509.MarshalPKIXPublicKey(k.rsaPub)
	if err != nil {
		t.Fatal(err)
	}
	good := sign(t, jose.RS256, k.rsa, "rsa1", claims("alice"))
	goodParts := strings.Split(good, ".")
	otherPayload := strings.Split(sign(t, jose.RS256, k.rsa, "rsa1", claims("mallory")), ".")[1]

	tests := []struct {
		name      string
		auth      *auth.OIDC
		token     string
		wantUser  string
		wantMsg   string // the client-visible message, after "unauthenticated: "
		wantCause string // in the error's wrapped cause
	}{
		{name: "RS256", auth: withAudience, token: good, wantUser: "alice"},
		{name: "ES256", auth: withAudience, token: sign(t, jose.ES256, k.ec, "ec1", claims("alice")), wantUser: "alice"},
		{name: "no kid", auth: withAudience, token: sign(t, jose.ES256, k.ec, "", claims("alice")), wantUser: "alice"},
		{name: "audience list", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("aud", []string{"other", testAudience}))), wantUser: "alice"},
		{name: "any audience", auth: anyAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("aud", "other"))), wantUser: "alice"},
		{name: "user claim", auth: byEmail, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("email", "alice@example.com"))), wantUser: "alice@example.com"},

		{name: "no header", auth: withAudience, token: "", wantMsg: "missing or malformed bearer token in the Authorization header"},
		{name: "not a JWT", auth: withAudience, token: "opaque-token", wantMsg: "bearer token is not a JWT"},
		{name: "garbage JWT", auth: withAudience, token: "a.b.c", wantMsg: "invalid token", wantCause: "malformed jwt"},
		{name: "expired", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("exp", time.Now().Add(-time.Minute).Unix()))), wantMsg: "token expired", wantCause: "expired"},
		{name: "no exp", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", del("exp"))), wantMsg: "token expired", wantCause: "expired"},
		{name: "not yet valid", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("nbf", time.Now().Add(time.Hour).Unix()))), wantMsg: "invalid token", wantCause: "nbf"},
		{name: "wrong issuer", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("iss", "https://evil.example"))), wantMsg: "invalid token", wantCause: "different provider"},
		{name: "wrong audience", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("aud", "other"))), wantMsg: "invalid token", wantCause: "expected audience"},
		{name: "no audience", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", del("aud"))), wantMsg: "invalid token", wantCause: "expected audience"},
		{name: "unknown kid", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa9", claims("alice")), wantMsg: "invalid token", wantCause: `no key with id "rsa9"`},
		{name: "kid of a key for another alg", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "ec1", claims("alice")), wantMsg: "invalid token", wantCause: `no key with id "ec1"`},
		{name: "wrong key", auth: withAudience, token: sign(t, jose.RS256, k.stranger, "rsa1", claims("alice")), wantMsg: "invalid token", wantCause: "signature does not verify"},
		{name: "wrong key no kid", auth: withAudience, token: sign(t, jose.RS256, k.stranger, "", claims("alice")), wantMsg: "invalid token", wantCause: "signature does not verify"},
		{name: "tampered payload", auth: withAudience, token: goodParts[0] + "." + otherPayload + "." + goodParts[2], wantMsg: "invalid token", wantCause: "signature does not verify"},
		{name: "alg none", auth: withAudience, token: unsigned(t, "rsa1", claims("alice")), wantMsg: "invalid token", wantCause: "none"},
		{name: "HS256 with the public key as secret", auth: withAudience, token: sign(t, jose.HS256, pubDER, "rsa1", claims("alice")), wantMsg: "invalid token", wantCause: "HS256"},
		{name: "no sub", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", del("sub"))), wantMsg: "token does not name a user", wantCause: `no "sub" claim`},
		{name: "empty sub", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("")), wantMsg: "token does not name a user", wantCause: `"sub" claim is empty`},
		{name: "null sub", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("sub", nil))), wantMsg: "token does not name a user", wantCause: `"sub" claim is empty`},
		{name: "numeric sub", auth: withAudience, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("sub", 42))), wantMsg: "invalid token", wantCause: "cannot unmarshal number"},
		{name: "numeric user claim", auth: byEmail, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("email", 42))), wantMsg: "token does not name a user", wantCause: `"email" claim is not a string`},
		{name: "empty user claim", auth: byEmail, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("email", ""))), wantMsg: "token does not name a user", wantCause: `"email" claim is empty`},
		{name: "missing user claim", auth: byEmail, token: good, wantMsg: "token does not name a user", wantCause: `no "email" claim`},
		{name: "array user claim", auth: byEmail, token: sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", set("email", []string{"a@example.com"}))), wantMsg: "token does not name a user", wantCause: "not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			user, err := tt.auth.Authenticate(t.Context(), bearer(tt.token))
			if tt.wantUser != "" {
				if err != nil || user != tt.wantUser {
					t.Fatalf("Authenticate = %q, %v; want %q", user, errorText(err), tt.wantUser)
				}
				return
			}
			if err == nil {
				t.Fatalf("Authenticate = %q, want an error", user)
			}
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("error %v does not wrap ErrUnauthenticated", err)
			}
			if got, want := err.Error(), "unauthenticated: "+tt.wantMsg; got != want {
				t.Errorf("error message %q, want %q", got, want)
			}
			if !strings.Contains(errorText(err), tt.wantCause) {
				t.Errorf("error chain does not contain %q:\n%s", tt.wantCause, errorText(err))
			}
			if tt.token != "" && strings.Contains(errorText(err), tt.token) {
				t.Errorf("error chain contains the token")
			}
		})
	}
}

func TestNewOIDCErrors(t *testing.T) {
	t.Parallel()
	jwks := string(jwksJSON(t))
	tests := []struct {
		name    string
		cfg     auth.OIDCConfig
		jwks    *string // written to cfg.JWKSFile when set
		wantErr string
		path    bool // the error must name the file
	}{
		{name: "no issuer", cfg: auth.OIDCConfig{JWKSURL: "https://issuer.example/keys"}, wantErr: "issuer is required"},
		{name: "no audience", cfg: auth.OIDCConfig{Issuer: testIssuer}, jwks: &jwks, wantErr: "an audience is required"},
		{name: "audience and any audience", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience, AnyAudience: true}, jwks: &jwks, wantErr: "not both"},
		{name: "file and URL", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: "https://issuer.example/keys"}, jwks: &jwks, wantErr: "not both"},
		{name: "missing file", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience, JWKSFile: "/nonexistent/jwks.json"}, wantErr: "/nonexistent/jwks.json"},
		{name: "empty file", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(""), wantErr: "unexpected end of JSON", path: true},
		{name: "not JSON", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr("keys"), wantErr: "invalid character", path: true},
		{name: "no keys", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(`{"keys":[]}`), wantErr: "no signing keys", path: true},
		{name: "no keys member", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(`{}`), wantErr: "no signing keys", path: true},
		{name: "symmetric key", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(`{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQ"}]}`), wantErr: `key 0 (kid "h") is symmetric`, path: true},
		{name: "encryption keys only", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(strings.ReplaceAll(jwks, `"sig"`, `"enc"`)), wantErr: "no signing keys", path: true},
		{name: "bad key", cfg: auth.OIDCConfig{Issuer: testIssuer, Audience: testAudience}, jwks: ptr(`{"keys":[{"kty":"EC","crv":"P-256","kid":"e","x":"AQ","y":"AQ"}]}`), wantErr: "invalid EC public key", path: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			if tt.jwks != nil {
				cfg.JWKSFile = writeFile(t, *tt.jwks)
			}
			o, err := auth.NewOIDC(t.Context(), cfg)
			if err == nil {
				t.Fatalf("NewOIDC = %v, want an error", o)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if tt.path && !strings.Contains(err.Error(), cfg.JWKSFile) {
				t.Errorf("error %q does not name the file %s", err, cfg.JWKSFile)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestOIDCRemoteKeys checks the JWKS URL and discovery configurations against
// a local issuer.
func TestOIDCRemoteKeys(t *testing.T) {
	t.Parallel()
	k := testKeys()
	jwks := jwksJSON(t)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks)
	})
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                srv.URL,
			"jwks_uri":                              srv.URL + "/keys",
			"authorization_endpoint":                srv.URL + "/authorize",
			"token_endpoint":                        srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256", "HS256", "none"},
		})
	})
	tests := []struct {
		name string
		cfg  auth.OIDCConfig
	}{
		{"JWKS URL", auth.OIDCConfig{Issuer: srv.URL, Audience: testAudience, JWKSURL: srv.URL + "/keys"}},
		{"discovery", auth.OIDCConfig{Issuer: srv.URL, Audience: testAudience}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := auth.NewOIDC(t.Context(), tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			iss := func(c map[string]any) { c["iss"] = srv.URL }
			for _, tok := range []string{
				sign(t, jose.RS256, k.rsa, "rsa1", claims("alice", iss)),
				sign(t, jose.ES256, k.ec, "ec1", claims("alice", iss)),
			} {
				if user, err := o.Authenticate(t.Context(), bearer(tok)); user != "alice" {
					t.Errorf("Authenticate = %q, %v; want alice", user, errorText(err))
				}
			}
			for name, tok := range map[string]string{
				"wrong key": sign(t, jose.RS256, k.stranger, "rsa1", claims("alice", iss)),
				"alg none":  unsigned(t, "rsa1", claims("alice", iss)),
				"wrong iss": sign(t, jose.RS256, k.rsa, "rsa1", claims("alice")),
			} {
				if user, err := o.Authenticate(t.Context(), bearer(tok)); !errors.Is(err, auth.ErrUnauthenticated) {
					t.Errorf("%s: Authenticate = %q, %v; want ErrUnauthenticated", name, user, err)
				}
			}
		})
	}
	t.Run("discovery fails", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: srv.URL + "/elsewhere", Audience: testAudience})
		if err == nil || !strings.Contains(err.Error(), "discovery") {
			t.Errorf("NewOIDC with no discovery document = %v, want a discovery error", err)
		}
	})
}
