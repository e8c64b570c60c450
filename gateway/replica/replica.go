// Package replica lets the gateway replicas of one deployment trust each
// other rather than their shared store.
//
// A request that needs a session's agent is forwarded to the replica that
// holds the session's lease, at the address the lease names. Whoever can
// write to the store (anyone with the Redis URL, or an agent that reads
// it) could plant a lease naming a listener of their own, and receive
// other users' prompts, and with them their bearer tokens. With a [Secret]
// that every replica of the deployment shares (`--replica-secret-file`):
//
//   - a replica forwards a request only to a peer that first proves it
//     holds the secret: it sends a random challenge to the peer's
//     [ProofPath] and checks the answer, an HMAC of the challenge and of
//     the address it dialled, which a real replica gives only for its own
//     advertised address ([Secret.Verify], [Secret.Handler]). A listener
//     without the secret cannot answer, nor get the answer from a real
//     replica for its own address;
//   - the user's bearer token never leaves the replica it was sent to: the
//     forwarded request carries the user, asserted under the secret for
//     the one replica and procedure it is sent to, for a minute
//     ([Secret.Assert]), and the receiving replica takes the user from the
//     assertion only when it verifies ([Secret.Authenticator]);
//   - a replica refuses requests marked forwarded ([ForwardedHeader])
//     that carry no valid assertion, such as those of a replica without the
//     secret.
//
// The secret authenticates; it does not encrypt: forwarded requests, their
// prompts and events travel between replicas as they are sent (plain HTTP
// unless the replicas advertise https:// addresses), so keep the replicas'
// network private.
package replica

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
)

// Names on the wire.
const (
	// ForwardedHeader marks a request one replica forwarded to the replica
	// that runs the session. A forwarded request is never forwarded again,
	// so two replicas that disagree about ownership cannot loop.
	ForwardedHeader = "Acp-Gateway-Forwarded"
	// AssertionHeader carries a forwarded request's user, asserted under
	// the secret: `v1.UNIX_SECONDS.USER.MAC`, USER and MAC in unpadded
	// base64url.
	AssertionHeader = "Acp-Gateway-Replica-Assertion"
	// ProofPath is where a replica answers a peer's challenge (POST).
	ProofPath = "/acp-gateway.replica.v1/Prove"
	// ChallengeHeader carries the challenge to ProofPath, ProofHeader the
	// answer.
	ChallengeHeader = "Acp-Gateway-Replica-Challenge"
	ProofHeader     = "Acp-Gateway-Replica-Proof"
)

// MinSecretBytes is the length of the shortest secret: 32 bytes, such as
// the 64 characters `openssl rand -hex 32` prints.
const MinSecretBytes = 32

// maxSkew is how far a forwarded request's assertion may be from this
// replica's clock, either way.
const maxSkew = time.Minute

// Secret is the secret the replicas of a deployment share. It is safe for
// concurrent use.
type Secret struct {
	// proofKey and assertKey are derived from the secret, one per use, so
	// that a peer's proof can never pass as an assertion.
	proofKey, assertKey []byte
	now                 func() time.Time
}

// LoadSecret reads the secret from the file at path: its content, less
// surrounding white space, of at least MinSecretBytes bytes. Errors never
// contain the secret.
func LoadSecret(path string) (*Secret, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replica secret: %w", err)
	}
	s, err := NewSecret(bytes.TrimSpace(data))
	if err != nil {
		return nil, fmt.Errorf("replica secret file %s: %w (make one with `openssl rand -hex 32 > %s`, the same file on every replica)", path, err, path)
	}
	return s, nil
}

// NewSecret returns the Secret of secret, at least MinSecretBytes bytes.
func NewSecret(secret []byte) (*Secret, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("the secret is %d bytes; it needs at least %d", len(secret), MinSecretBytes)
	}
	derive := func(use string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("acp-gateway replica " + use + " v1"))
		return m.Sum(nil)
	}
	return &Secret{proofKey: derive("proof"), assertKey: derive("assertion"), now: time.Now}, nil
}

// mac returns the HMAC-SHA256 under key of fields, each prefixed with its
// length so that no two lists of fields read alike.
func mac(key []byte, fields ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, f := range fields {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// Handler answers challenges at ProofPath for the replica whose advertised
// address is self: it proves the secret for self alone.
func (s *Secret) Handler(self string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		challenge := r.Header.Get(ChallengeHeader)
		if len(challenge) < 16 || len(challenge) > 256 {
			http.Error(w, "want a challenge of 16 to 256 characters in "+ChallengeHeader, http.StatusBadRequest)
			return
		}
		w.Header().Set(ProofHeader, b64.EncodeToString(mac(s.proofKey, "proof", self, challenge)))
		w.WriteHeader(http.StatusNoContent)
	})
}

// ErrUnreachable is wrapped by Verify's error when the peer did not answer
// at all (the connection refused, or no answer in time): a replica that
// is down or restarting, rather than one that does not prove the secret.
var ErrUnreachable = errors.New("the replica did not answer")

// noRedirects stops a client at a redirect: a peer is what its address
// answers, nothing it points to.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Verify checks that the replica at peer, the base URL a lease names,
// holds the secret: it sends a new challenge to peer's ProofPath with
// client (following no redirect) and checks the proof for peer. Nothing
// but the challenge is sent. ctx bounds the wait for the answer: give it
// a deadline, as a frozen peer's kernel still accepts the connection.
// When peer does not answer, the error wraps ErrUnreachable.
func (s *Secret) Verify(ctx context.Context, client *http.Client, peer string) error {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	challenge := b64.EncodeToString(raw[:])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(peer, "/")+ProofPath, nil)
	if err != nil {
		return fmt.Errorf("replica address %q: %w", peer, err)
	}
	req.Header.Set(ChallengeHeader, challenge)
	c := *client
	c.CheckRedirect = noRedirects
	res, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("asking %s to prove the replica secret: %w: %w", peer, ErrUnreachable, err)
	}
	res.Body.Close()
	got, _ := b64.DecodeString(res.Header.Get(ProofHeader))
	if res.StatusCode != http.StatusNoContent || !hmac.Equal(got, mac(s.proofKey, "proof", peer, challenge)) {
		return fmt.Errorf("%s did not prove it holds the replica secret (HTTP %d): "+
			"not a replica of this deployment, or one with another --replica-secret-file", peer, res.StatusCode)
	}
	return nil
}

// Assert sets h's assertion that user makes the call of procedure (such
// as /acp.v2.SessionService/Prompt), forwarded to the replica at target.
func (s *Secret) Assert(h http.Header, target, procedure, user string) {
	ts := strconv.FormatInt(s.now().Unix(), 10)
	h.Set(AssertionHeader, strings.Join([]string{"v1", ts, b64.EncodeToString([]byte(user)),
		b64.EncodeToString(mac(s.assertKey, "assertion", target, procedure, ts, user))}, "."))
}

// errAssertion is the client-safe answer to a forwarded request that is
// not accepted.
var errAssertion = fmt.Errorf("%w: the forwarded request's replica assertion is not valid", auth.ErrUnauthenticated)

// errUnasserted answers a request marked forwarded that carries no
// assertion.
var errUnasserted = fmt.Errorf("%w: a request forwarded by a replica needs its replica assertion (the same --replica-secret-file on every replica)",
	auth.ErrUnauthenticated)

// asserted returns the user h's assertion names, if it verifies for the
// replica at self and procedure.
func (s *Secret) asserted(h http.Header, self, procedure string) (string, error) {
	parts := strings.Split(h.Get(AssertionHeader), ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return "", errAssertion
	}
	ts, err := strconv.ParseInt(parts[1], 10, 64)
	user, uerr := b64.DecodeString(parts[2])
	got, merr := b64.DecodeString(parts[3])
	if err != nil || uerr != nil || merr != nil ||
		!hmac.Equal(got, mac(s.assertKey, "assertion", self, procedure, parts[1], string(user))) {
		return "", errAssertion
	}
	if d := s.now().Sub(time.Unix(ts, 0)); d > maxSkew || d < -maxSkew {
		// It verifies: a replica made it, and guessed nothing.
		return "", auth.NotAGuess(fmt.Errorf("%w: the forwarded request's replica assertion is %v old; are the replicas' clocks apart?",
			auth.ErrUnauthenticated, d.Round(time.Second)))
	}
	return string(user), nil
}

// Authenticator returns the authenticator of the replica at self (its
// advertised address): a request that carries an assertion is the
// asserted user's when the assertion verifies for self and the request's
// procedure (auth.Procedure), and is refused otherwise, whatever else it
// carries; a request marked forwarded without one is refused; any other
// request is next's to authenticate.
func (s *Secret) Authenticator(self string, next auth.Authenticator) auth.Authenticator {
	return authenticator{s: s, self: self, next: next}
}

type authenticator struct {
	s    *Secret
	self string
	next auth.Authenticator
}

// Authenticate implements auth.Authenticator.
func (a authenticator) Authenticate(ctx context.Context, h http.Header) (string, error) {
	switch {
	case h.Get(AssertionHeader) != "":
		return a.s.asserted(h, a.self, auth.Procedure(ctx))
	case h.Get(ForwardedHeader) != "":
		return "", errUnasserted
	}
	return a.next.Authenticate(ctx, h)
}
