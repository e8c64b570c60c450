package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// testIssuer and testAudience are the issuer and audience of the test JWTs.
const (
	testIssuer   = "https://issuer.example"
	testAudience = "acp-gateway"
)

// writeFile writes content to a new file in a test directory and returns
// its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bearer returns headers carrying `Authorization: Bearer token`, or none for
// an empty token.
func bearer(token string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h
}

// errorText returns the messages of err and of everything it wraps, so that
// tests can check an error's server-side cause as well as its client text.
func errorText(err error) string {
	var b strings.Builder
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		b.WriteString(err.Error())
		b.WriteString("\n")
		switch u := err.(type) { //nolint:errorlint // this walks the chain itself, one link at a time
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return b.String()
}

// keys are the test signing keys: rsa and ec are published in the JWKS,
// stranger is not.
type keys struct {
	rsa, ec, stranger any
	rsaPub            *rsa.PublicKey
}

var testKeys = sync.OnceValue(func() keys {
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	s, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return keys{rsa: r, ec: e, stranger: s, rsaPub: &r.PublicKey}
})

// jwksJSON returns the public JWKS of the test keys: kid "rsa1" (RS256) and
// "ec1" (ES256).
func jwksJSON(t *testing.T) []byte {
	t.Helper()
	k := testKeys()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: k.rsaPub, KeyID: "rsa1", Algorithm: "RS256", Use: "sig"},
		{Key: &k.ec.(*ecdsa.PrivateKey).PublicKey, KeyID: "ec1", Algorithm: "ES256", Use: "sig"},
	}}
	data, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// claims returns valid claims for user, changed by the given edits.
func claims(user string, edits ...func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": testIssuer,
		"aud": testAudience,
		"sub": user,
		"iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}
	for _, e := range edits {
		e(c)
	}
	return c
}

// sign returns a compact JWS of c signed with key under alg, naming kid in
// its header when kid is not empty.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, c map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	token, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

var errBroken = errors.New("backend down: secret detail")
