// Package auth authenticates Connect RPCs.
//
// An [Authenticator] turns a request's headers into a user name. Two are
// provided: [Tokens], the static `--auth-tokens FILE` table of bearer tokens,
// and [OIDC], bearer JWTs signed by an OpenID Connect issuer. [Chain] tries
// several in turn, and [NewInterceptor] applies one to every RPC a Connect
// handler serves, putting the user in the context where [User] finds it.
//
// Errors returned by the authenticators here wrap [ErrUnauthenticated]. Their
// messages are safe to send to a client: they never contain a token or the
// server's configuration. The detailed cause, for server logs, is wrapped
// too: [errors.Is] and [errors.As] reach it, and the message does not show it.
package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// Authenticator finds the user a request's headers authenticate.
type Authenticator interface {
	// Authenticate returns the user, or an error wrapping ErrUnauthenticated
	// (message safe to show a client, never containing the token).
	Authenticate(ctx context.Context, h http.Header) (user string, err error)
}

// ErrUnauthenticated is wrapped by every error that means the request's
// credentials are missing or not accepted.
var ErrUnauthenticated = errors.New("unauthenticated")

// userKey is the context key under which WithUser stores the user.
type userKey struct{}

// WithUser returns a copy of ctx carrying user.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// User returns the user WithUser stored in ctx, or "" when there is none.
func User(ctx context.Context) string {
	user, _ := ctx.Value(userKey{}).(string)
	return user
}

// procedureKey is the context key of the procedure being authenticated.
type procedureKey struct{}

// WithProcedure returns a copy of ctx for authenticating a call of
// procedure, as NewInterceptor makes it (see [Procedure]).
func WithProcedure(ctx context.Context, procedure string) context.Context {
	return context.WithValue(ctx, procedureKey{}, procedure)
}

// Procedure returns the procedure (such as /acp.v2.SessionService/Prompt)
// of the call an Authenticator is asked about, when NewInterceptor asks:
// for credentials that are good for one procedure only.
func Procedure(ctx context.Context) string {
	p, _ := ctx.Value(procedureKey{}).(string)
	return p
}

// BearerToken returns the token of h's `Authorization: Bearer TOKEN` header.
// It reports false when there is no such header, when there is more than one
// Authorization header, or when the header is not a single bearer token. The
// scheme is matched case-insensitively.
func BearerToken(h http.Header) (token string, ok bool) {
	values := h.Values("Authorization")
	if len(values) != 1 {
		return "", false
	}
	scheme, token, found := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// authError is an authentication failure. Its message is meant for clients;
// cause carries the detail for server logs and never reaches a client through
// Error.
type authError struct {
	msg   string
	cause error
	// other is set when the credential is of a kind the authenticator does not
	// handle (an opaque token given to OIDC, a JWT unknown to Tokens), so that
	// Chain prefers another authenticator's error.
	other bool
}

func (e *authError) Error() string { return "unauthenticated: " + e.msg }

func (e *authError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrUnauthenticated}
	}
	return []error{ErrUnauthenticated, e.cause}
}

// unauthenticated returns an authError with the client-safe msg and an
// optional cause.
func unauthenticated(msg string, cause error) error {
	return &authError{msg: msg, cause: cause}
}

// errNoToken is returned when a request carries no usable bearer token.
var errNoToken = unauthenticated("missing or malformed bearer token in the Authorization header", nil)

// isJWT reports whether token has the shape of a compact JWS, the form of a
// JWT: three dot-separated parts.
func isJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

// Chain returns an Authenticator that tries each of as in order and returns
// the first user found. A miss in one (such as a JWT, unknown to a Tokens
// table) falls through to the next. When all fail, the error is that of the
// first authenticator that handles the credential's kind (a JWT is reported
// by OIDC, an opaque token by Tokens), and it always wraps
// ErrUnauthenticated. With no authenticators every request fails.
func Chain(as ...Authenticator) Authenticator {
	return chain(append([]Authenticator(nil), as...))
}

type chain []Authenticator

// Authenticate implements Authenticator.
func (c chain) Authenticate(ctx context.Context, h http.Header) (string, error) {
	var best, first error
	for _, a := range c {
		user, err := a.Authenticate(ctx, h)
		if err == nil && user != "" {
			return user, nil
		}
		if err == nil || !errors.Is(err, ErrUnauthenticated) {
			// A broken authenticator: its error text is not known to be safe.
			err = unauthenticated("credentials not accepted", err)
		}
		if first == nil {
			first = err
		}
		var ae *authError
		if best == nil && (!errors.As(err, &ae) || !ae.other) {
			best = err
		}
	}
	switch {
	case best != nil:
		return "", best
	case first != nil:
		return "", first
	default:
		return "", unauthenticated("no authentication method is configured", nil)
	}
}
