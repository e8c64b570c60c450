package auth_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
)

func TestUserContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if got := auth.User(ctx); got != "" {
		t.Errorf("User(no user) = %q, want empty", got)
	}
	if got := auth.User(auth.WithUser(ctx, "alice")); got != "alice" {
		t.Errorf("User(WithUser(alice)) = %q", got)
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string // "" means not ok
	}{
		{"none", nil, ""},
		{"bearer", []string{"Bearer abc"}, "abc"},
		{"lower case", []string{"bearer abc"}, "abc"},
		{"extra spaces", []string{"  Bearer   abc  "}, "abc"},
		{"basic", []string{"Basic abc"}, ""},
		{"scheme only", []string{"Bearer"}, ""},
		{"empty token", []string{"Bearer  "}, ""},
		{"two tokens", []string{"Bearer a b"}, ""},
		{"tab inside", []string{"Bearer a\tb"}, ""},
		{"two headers", []string{"Bearer a", "Bearer b"}, ""},
		{"bearerish scheme", []string{"Bearerx abc"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Authorization", v)
			}
			got, ok := auth.BearerToken(h)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("BearerToken(%q) = %q, %v; want %q", tt.values, got, ok, tt.want)
			}
		})
	}
}

// authFunc adapts a function to auth.Authenticator.
type authFunc func(context.Context, http.Header) (string, error)

func (f authFunc) Authenticate(ctx context.Context, h http.Header) (string, error) { return f(ctx, h) }

func TestChain(t *testing.T) {
	t.Parallel()
	k := testKeys()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	oidc := newTestOIDC(t, auth.OIDCConfig{Audience: testAudience})
	jwt := sign(t, jose.ES256, k.ec, "ec1", claims("bob"))
	expired := sign(t, jose.ES256, k.ec, "ec1", claims("bob", func(c map[string]any) { c["exp"] = 1 }))
	broken := authFunc(func(context.Context, http.Header) (string, error) { return "", errBroken })
	silent := authFunc(func(context.Context, http.Header) (string, error) { return "", nil })

	tests := []struct {
		name     string
		chain    auth.Authenticator
		token    string
		wantUser string
		wantMsg  string
	}{
		{"static token", auth.Chain(tokens, oidc), "static-token-0123456789", "alice", ""},
		{"JWT falls through Tokens", auth.Chain(tokens, oidc), jwt, "bob", ""},
		{"static token falls through OIDC", auth.Chain(oidc, tokens), "static-token-0123456789", "alice", ""},
		{"JWT first", auth.Chain(oidc, tokens), jwt, "bob", ""},
		{"unknown opaque token", auth.Chain(tokens, oidc), "other-token-0123456789", "", "unknown bearer token"},
		{"unknown opaque token OIDC first", auth.Chain(oidc, tokens), "other-token-0123456789", "", "unknown bearer token"},
		{"expired JWT", auth.Chain(tokens, oidc), expired, "", "token expired"},
		{"expired JWT OIDC first", auth.Chain(oidc, tokens), expired, "", "token expired"},
		{"opaque token, OIDC only", auth.Chain(oidc), "other-token-0123456789", "", "bearer token is not a JWT"},
		{"JWT, Tokens only", auth.Chain(tokens), jwt, "", "unknown bearer token"},
		{"no header", auth.Chain(tokens, oidc), "", "", "missing or malformed bearer token in the Authorization header"},
		{"broken then good", auth.Chain(broken, tokens), "static-token-0123456789", "alice", ""},
		{"broken only", auth.Chain(broken), "static-token-0123456789", "", "credentials not accepted"},
		{"empty user is no user", auth.Chain(silent), "static-token-0123456789", "", "credentials not accepted"},
		{"empty chain", auth.Chain(), "static-token-0123456789", "", "no authentication method is configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			user, err := tt.chain.Authenticate(t.Context(), bearer(tt.token))
			if tt.wantUser != "" {
				if err != nil || user != tt.wantUser {
					t.Fatalf("Authenticate = %q, %v; want %q", user, errorText(err), tt.wantUser)
				}
				return
			}
			if user != "" || !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("Authenticate = %q, %v; want ErrUnauthenticated", user, err)
			}
			if got, want := err.Error(), "unauthenticated: "+tt.wantMsg; got != want {
				t.Errorf("error message %q, want %q", got, want)
			}
			if strings.Contains(err.Error(), "secret detail") {
				t.Errorf("error message %q shows a broken authenticator's detail", err)
			}
		})
	}
}
