package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// DefaultUserClaim is the claim that names the user when
// OIDCConfig.UserClaim is empty.
const DefaultUserClaim = "sub"

// signingAlgs are the JWS algorithms accepted with a JWKS file or URL: the
// asymmetric ones. "none" and the HMAC algorithms (HS256...) are never
// accepted, so a public key cannot be misused as an HMAC secret.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// OIDCConfig configures an OIDC authenticator.
type OIDCConfig struct {
	// Issuer is required; it must equal the token's iss claim.
	Issuer string
	// Audience must be one of the token's aud values: the client id the
	// issuer gave this gateway. It is required unless AnyAudience is set.
	Audience string
	// AnyAudience accepts a token of Issuer whatever its audience: tokens
	// the issuer minted for any of its other applications too. Unsafe
	// unless the issuer serves this gateway alone; it is an error with
	// Audience.
	AnyAudience bool
	// JWKSFile is a local JSON Web Key Set file holding the issuer's public
	// keys. It is read once, by NewOIDC.
	JWKSFile string
	// JWKSURL is the address of the issuer's JSON Web Key Set. When both
	// JWKSFile and JWKSURL are empty, it is found by OpenID Connect discovery
	// from Issuer + "/.well-known/openid-configuration".
	JWKSURL string
	// UserClaim names the claim that holds the user, DefaultUserClaim when
	// empty. It must be a non-empty string in every accepted token.
	UserClaim string
}

// OIDC authenticates bearer JWTs signed by an OpenID Connect issuer. The
// token's signature, iss, aud (unless AnyAudience), exp and nbf are checked.
// OIDC is safe for concurrent use.
type OIDC struct {
	verifier  *oidc.IDTokenVerifier
	userClaim string
}

// NewOIDC returns an OIDC authenticator for cfg. It reads cfg.JWKSFile, or
// with neither a file nor a URL performs discovery over the network. ctx
// bounds discovery, and its values (such as an HTTP client set with
// oidc.ClientContext) are used for later key fetches; its cancellation is not.
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("oidc: issuer is required")
	}
	switch {
	case cfg.Audience == "" && !cfg.AnyAudience:
		return nil, errors.New("oidc: an audience is required (the client id the issuer puts in the tokens' aud claim for this gateway), " +
			"or AnyAudience to accept the issuer's tokens for every application")
	case cfg.Audience != "" && cfg.AnyAudience:
		return nil, errors.New("oidc: give an audience or AnyAudience, not both")
	}
	if cfg.JWKSFile != "" && cfg.JWKSURL != "" {
		return nil, errors.New("oidc: give a JWKS file or a JWKS URL, not both")
	}
	vcfg := &oidc.Config{
		ClientID:          cfg.Audience,
		SkipClientIDCheck: cfg.AnyAudience,
	}
	for _, alg := range signingAlgs {
		vcfg.SupportedSigningAlgs = append(vcfg.SupportedSigningAlgs, string(alg))
	}
	var verifier *oidc.IDTokenVerifier
	switch {
	case cfg.JWKSFile != "":
		keys, err := readJWKS(cfg.JWKSFile)
		if err != nil {
			return nil, err
		}
		verifier = oidc.NewVerifier(cfg.Issuer, noting{keys, false}, vcfg)
	case cfg.JWKSURL != "":
		verifier = oidc.NewVerifier(cfg.Issuer, noting{oidc.NewRemoteKeySet(ctx, cfg.JWKSURL), true}, vcfg)
	default:
		provider, err := oidc.NewProvider(ctx, cfg.Issuer)
		if err != nil {
			return nil, fmt.Errorf("oidc: discovery for issuer %q: %w", cfg.Issuer, err)
		}
		// The verifier provider.VerifierContext would make, but with the
		// key set noting.
		var meta struct {
			JWKSURL string   `json:"jwks_uri"`
			Algs    []string `json:"id_token_signing_alg_values_supported"`
		}
		if err := provider.Claims(&meta); err != nil {
			return nil, fmt.Errorf("oidc: discovery for issuer %q: %w", cfg.Issuer, err)
		}
		// The provider's advertised algorithms, less "none" and HS*; none
		// left means RS256.
		vcfg.SupportedSigningAlgs = nil
		for _, alg := range meta.Algs {
			if slices.Contains(signingAlgs, jose.SignatureAlgorithm(alg)) {
				vcfg.SupportedSigningAlgs = append(vcfg.SupportedSigningAlgs, alg)
			}
		}
		verifier = oidc.NewVerifier(cfg.Issuer, noting{oidc.NewRemoteKeySet(ctx, meta.JWKSURL), true}, vcfg)
	}
	claim := cfg.UserClaim
	if claim == "" {
		claim = DefaultUserClaim
	}
	return &OIDC{verifier: verifier, userClaim: claim}, nil
}

// Authenticate implements Authenticator for `Authorization: Bearer JWT`.
func (o *OIDC) Authenticate(ctx context.Context, h http.Header) (string, error) {
	raw, ok := BearerToken(h)
	if !ok {
		return "", errNoToken
	}
	if !isJWT(raw) {
		return "", &authError{msg: "bearer token is not a JWT", other: true}
	}
	n := &note{}
	tok, err := o.verifier.Verify(context.WithValue(ctx, noteKey{}, n), raw)
	if err != nil {
		msg := "invalid token"
		_, expired := errors.AsType[*oidc.TokenExpiredError](err)
		if expired {
			msg = "token expired"
		}
		// A token the issuer signed, refused for its times by this clock
		// (expired, or not valid yet), or one that could not be checked,
		// is no guess.
		notGuess := n.fetchFailed || n.signed && (expired || strings.Contains(err.Error(), "(not before)"))
		if err = unauthenticated(msg, err); notGuess {
			err = NotAGuess(err)
		}
		return "", err
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return "", unauthenticated("invalid token", err)
	}
	var user string
	if rawUser, ok := claims[o.userClaim]; !ok {
		err = fmt.Errorf("oidc: no %q claim", o.userClaim)
	} else if json.Unmarshal(rawUser, &user) != nil {
		err = fmt.Errorf("oidc: %q claim is not a string", o.userClaim)
	} else if user == "" {
		err = fmt.Errorf("oidc: %q claim is empty", o.userClaim)
	}
	if err != nil {
		// The issuer signed it: no guess.
		return "", NotAGuess(unauthenticated("token does not name a user", err))
	}
	return user, nil
}

// noting is a key set that notes, in the note of the context it verifies
// a token's signature in, whether the signature verified, or could not be
// checked because the issuer's keys could not be fetched: go-oidc's error
// says so only in its text.
type noting struct {
	oidc.KeySet
	remote bool // an oidc.RemoteKeySet
}

// note is what noting notes of one verification.
type note struct {
	signed, fetchFailed bool
}

type noteKey struct{}

// VerifySignature implements oidc.KeySet.
func (s noting) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	payload, err := s.KeySet.VerifySignature(ctx, raw)
	if n, ok := ctx.Value(noteKey{}).(*note); ok {
		n.signed = err == nil
		// oidc.RemoteKeySet's error when the keys cannot be fetched (the
		// issuer's answer, or its absence); a bad signature's is
		// "failed to verify id token signature", a malformed token's
		// "oidc: malformed jwt: ...".
		n.fetchFailed = err != nil && s.remote && strings.HasPrefix(err.Error(), "fetching keys")
	}
	return payload, err
}

// readJWKS reads a JSON Web Key Set file of public signing keys.
func readJWKS(path string) (*jwks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oidc: JWKS file: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("oidc: JWKS file %s: %w", path, err)
	}
	keys := &jwks{}
	for i, k := range set.Keys {
		if _, symmetric := k.Key.([]byte); symmetric {
			return nil, fmt.Errorf("oidc: JWKS file %s: key %d (kid %q) is symmetric; only public keys are accepted", path, i, k.KeyID)
		}
		if !k.Valid() {
			return nil, fmt.Errorf("oidc: JWKS file %s: key %d (kid %q) is not valid", path, i, k.KeyID)
		}
		if k.Use == "enc" {
			continue
		}
		// Only the public half of a private key is kept.
		pub := k.Public()
		if pub.Key == nil {
			return nil, fmt.Errorf("oidc: JWKS file %s: key %d (kid %q) has no usable public key", path, i, k.KeyID)
		}
		keys.keys = append(keys.keys, pub)
	}
	if len(keys.keys) == 0 {
		return nil, fmt.Errorf("oidc: JWKS file %s: no signing keys", path)
	}
	return keys, nil
}

// jwks is an oidc.KeySet of fixed public keys. Unlike oidc.StaticKeySet it
// honours key ids: a token naming a kid is only checked against that key.
type jwks struct {
	keys []jose.JSONWebKey
}

// VerifySignature implements oidc.KeySet.
func (s *jwks) VerifySignature(_ context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	hdr := jws.Signatures[0].Header
	tried := false
	for i := range s.keys {
		k := &s.keys[i]
		if hdr.KeyID != "" && k.KeyID != hdr.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != hdr.Algorithm {
			continue
		}
		tried = true
		if payload, err := jws.Verify(k); err == nil {
			return payload, nil
		}
	}
	if !tried {
		return nil, fmt.Errorf("no key with id %q for algorithm %s", hdr.KeyID, hdr.Algorithm)
	}
	return nil, errors.New("signature does not verify")
}
