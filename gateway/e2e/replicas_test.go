package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/replica"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

// Tokens of the replica tests' users.
const (
	aliceToken = "tok-alice-0123456789"
	bobToken   = "tok-bob-0123456789"
)

// sharedRedis is a Redis store prefix of the test's own, which replicas
// share; its keys are deleted when the test ends.
type sharedRedis struct {
	prefix string
	admin  *redis.Client
}

func newSharedRedis(t *testing.T) *sharedRedis {
	t.Helper()
	o, err := redis.ParseURL(testutil.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := &sharedRedis{prefix: "acpgw-e2e-" + hex.EncodeToString(b[:]) + ":", admin: redis.NewClient(o)}
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, err := r.admin.Keys(ctx, r.prefix+"*").Result(); err == nil && len(keys) > 0 {
			r.admin.Del(ctx, keys...)
		}
		r.admin.Close()
	})
	return r
}

// forgeLease makes the store name holder as the replica of session id, as
// anyone who can write to Redis can.
func (r *sharedRedis) forgeLease(t *testing.T, id, holder string) {
	t.Helper()
	key := r.prefix + "s:{" + id + "}:lease"
	if err := r.admin.Set(context.Background(), key, holder, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

// forwardedCalls records the headers of the calls that reach a gateway's
// handlers forwarded by another replica.
type forwardedCalls struct {
	mu    sync.Mutex
	calls []http.Header
}

func (f *forwardedCalls) note(procedure string, h http.Header) {
	if h.Get(replica.ForwardedHeader) == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h = h.Clone()
	h.Set("Procedure", procedure)
	f.calls = append(f.calls, h)
}

func (f *forwardedCalls) all() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.calls...)
}

func (f *forwardedCalls) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		f.note(req.Spec().Procedure, req.Header())
		return next(ctx, req)
	}
}

func (f *forwardedCalls) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f *forwardedCalls) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		f.note(conn.Spec().Procedure, conn.RequestHeader())
		return next(ctx, conn)
	}
}

// testReplica is one gateway replica on a sharedRedis.
type testReplica struct {
	*gateway
	// forwarded are the calls other replicas forwarded to it that its
	// handlers got.
	forwarded *forwardedCalls
	// log is its JSON log.
	log *testutil.SyncBuffer
}

// startReplica starts a replica on r with authentication (alice and bob)
// and the given secret; nil runs it with InsecureForwarding.
func startReplica(t *testing.T, r *sharedRedis, secret *replica.Secret, configure ...func(*app.Config)) *testReplica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redisstore.Open(ctx, testutil.RedisURL(), redisstore.Options{Prefix: r.prefix})
	if err != nil {
		t.Fatalf("the replica tests need the Redis at %s: %v", testutil.RedisURL(), err)
	}
	t.Cleanup(func() { st.Close() })
	l := testutil.Listen(t)
	rep := &testReplica{forwarded: &forwardedCalls{}, log: &testutil.SyncBuffer{}}
	rep.gateway = permissionGateway(t, gatewayOpts{
		store: st, auth: tokenFile(t, aliceToken+" alice", bobToken+" bob"), anyCwd: true,
		log: rep.log, listener: l,
		configure: func(c *app.Config) {
			c.Session.Replica = "http://" + l.Addr().String()
			c.ReplicaSecret = secret
			c.InsecureForwarding = secret == nil
			c.Interceptors = append(c.Interceptors, rep.forwarded)
			for _, f := range configure {
				f(c)
			}
		},
	})
	return rep
}

func newReplicaSecret(t *testing.T) *replica.Secret {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:])
	s, err := replica.NewSecret([]byte(hex.EncodeToString(b[:])))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// createAs creates a session of the perm agent on g as the holder of token.
func createAs(t *testing.T, g *gateway, token string) string {
	t.Helper()
	res, err := g.clientsAs(t, token)["connect+json"].CreateSession(context.Background(),
		connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSessionId()
}

// twoReplicas starts replicas A and B with one secret on a store of the
// test's, and creates a session of Alice's on A.
func twoReplicas(t *testing.T) (r *sharedRedis, a, b *testReplica, id string) {
	t.Helper()
	r = newSharedRedis(t)
	secret := newReplicaSecret(t)
	a, b = startReplica(t, r, secret), startReplica(t, r, secret)
	return r, a, b, createAs(t, a.gateway, aliceToken)
}

// Replicas with the secret forward to each other, carrying the user, not
// the user's token.
func TestReplicasForwardWithTheSecret(t *testing.T) {
	t.Parallel()
	_, a, b, id := twoReplicas(t)

	// Alice's turn through B, its permission answered through B, runs on A.
	alice := b.clientsAs(t, aliceToken)["grpc"]
	events := turn(t, alice, id, func(ev *acpv2.SessionEvent) {
		if p := ev.GetPermissionRequest(); p != nil {
			if _, err := alice.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: p.GetRequestId(), OptionId: "allow-once"})); err != nil {
				t.Errorf("RespondPermission through B: %v", err)
			}
		}
	})
	if got := events[len(events)-1].GetTurnEnded().GetStopReason(); got != "end_turn" {
		t.Fatalf("the turn through B ended %q", got)
	}
	calls := a.forwarded.all()
	procedures := map[string]bool{}
	for _, h := range calls {
		procedures[h.Get("Procedure")] = true
		if h.Get("Authorization") != "" || h.Get(replica.AssertionHeader) == "" {
			t.Errorf("a call forwarded to A: Authorization %q, assertion %q; want the user asserted, no token",
				h.Get("Authorization"), h.Get(replica.AssertionHeader))
		}
	}
	if !procedures["/acp.v2.SessionService/Prompt"] || !procedures["/acp.v2.SessionService/RespondPermission"] {
		t.Errorf("A got forwarded %v, want Prompt and RespondPermission", procedures)
	}
	// Bob, through B, still does not reach Alice's session.
	for rpc, err := range everyRPC(b.clientsAs(t, bobToken)["connect+json"], id, "perm-1") {
		if codeOf(err) != connect.CodeNotFound {
			t.Errorf("Bob's %s through B: %v, want not_found", rpc, err)
		}
	}
}

// A lease forged in the store to name a listener of the attacker's sends
// it no request, no token and no prompt: the replica asks it to prove the
// secret, and it cannot, not even by relaying the challenge to a real
// replica (it passes everything on to A, as a transparent proxy would).
func TestForgedLeaseGetsNothing(t *testing.T) {
	t.Parallel()
	r, a, b, id := twoReplicas(t)
	listener := testutil.NewRecorder(t, a.base)
	r.forgeLease(t, id, listener.URL)

	alice := b.clientsAs(t, aliceToken)["connect+json"]
	ctx := context.Background()
	stream, err := alice.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("the secret plan")}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		stream.Close()
	}
	if codeOf(err) != connect.CodeInternal {
		t.Errorf("Prompt through B with a forged lease: %v, want internal", err)
	}
	// So do the other calls that need the session's agent.
	errs := map[string]error{}
	_, errs["Cancel"] = alice.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: id}))
	_, errs["RespondPermission"] = alice.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
		SessionId: id, RequestId: "perm-1", OptionId: "allow-once"}))
	_, errs["SetMode"] = alice.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: id, ModeId: "code"}))
	_, errs["CloseSession"] = alice.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	for rpc, err := range errs {
		if codeOf(err) != connect.CodeInternal {
			t.Errorf("%s through B with a forged lease: %v, want internal", rpc, err)
		}
	}
	got := listener.Requests()
	if len(got) == 0 {
		t.Fatal("the listener was not even asked to prove the secret")
	}
	for _, req := range got {
		if !strings.HasPrefix(req, "POST "+replica.ProofPath+"\n") || strings.Contains(req, "Authorization") ||
			strings.Contains(req, aliceToken) || strings.Contains(req, "secret plan") || strings.Contains(req, replica.AssertionHeader) {
			t.Errorf("the listener got more than a challenge:\n%s", req)
		}
	}
	// B tells its operator why, naming the address; Alice is told nothing of it.
	if !strings.Contains(b.log.String(), "did not prove it holds the replica secret") || !strings.Contains(b.log.String(), listener.URL) {
		t.Errorf("B's log does not say why it refused:\n%s", b.log)
	}
	if strings.Contains(err.Error(), listener.URL) {
		t.Errorf("the client is told the address: %v", err)
	}
}

// A replica without the secret, or with another one, is no peer: requests
// are not forwarded to it, and its forwarded requests are refused.
func TestReplicaWithoutTheSecretIsRefused(t *testing.T) {
	t.Parallel()
	r := newSharedRedis(t)
	a := startReplica(t, r, newReplicaSecret(t))
	for name, other := range map[string]struct {
		*testReplica
		// forwarding is the answer to a request it forwards to A: A
		// refuses one without an assertion; one with another secret
		// refuses to forward to A, which cannot prove its secret.
		forwarding connect.Code
	}{
		"no secret":      {startReplica(t, r, nil), connect.CodeUnauthenticated},
		"another secret": {startReplica(t, r, newReplicaSecret(t)), connect.CodeInternal},
	} {
		// Alice's session on the other replica, prompted through A: A
		// sends it nothing.
		id := createAs(t, other.gateway, aliceToken)
		err := promptErrAs(t, a.gateway, aliceToken, id)
		if codeOf(err) != connect.CodeInternal {
			t.Errorf("%s: Prompt through A of a session on it: %v, want internal", name, err)
		}
		if strings.Contains(other.log.String(), "acp.v2.SessionService/Prompt") {
			t.Errorf("%s: A forwarded to it:\n%s", name, other.log)
		}
		// Alice's session on A, prompted through it: A refuses what it
		// forwards.
		id = createAs(t, a.gateway, aliceToken)
		if err := promptErrAs(t, other.gateway, aliceToken, id); codeOf(err) != other.forwarding {
			t.Errorf("%s: Prompt through it of a session on A: %v, want %v", name, err, other.forwarding)
		}
		if n := len(a.forwarded.all()); n != 0 {
			t.Errorf("%s: %d forwarded calls reached A's handlers", name, n)
		}
		if seq := snapshotAs(t, a.gateway, aliceToken, id).GetLastSeq(); seq != 0 {
			t.Errorf("%s: the session on A has %d events, want none", name, seq)
		}
	}
}

// promptErrAs runs a prompt through g as the holder of token and returns
// its error.
func promptErrAs(t *testing.T, g *gateway, token, id string) error {
	t.Helper()
	// A turn that wrongly starts waits on its permission request: the
	// deadline ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := g.clientsAs(t, token)["grpc"].Prompt(ctx,
		connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

func snapshotAs(t *testing.T, g *gateway, token, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := g.clientsAs(t, token)["connect+json"].GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession()
}

// A gateway assembled with authentication on a shared store needs the
// replicas' secret, or the explicit opt-out.
func TestAppNeedsAReplicaSecret(t *testing.T) {
	t.Parallel()
	r := newSharedRedis(t)
	st, err := redisstore.Open(context.Background(), testutil.RedisURL(), redisstore.Options{Prefix: r.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := app.Config{Session: session.Options{Store: st}, Auth: tokenFile(t, aliceToken+" alice"), AnyCwd: true}
	if _, err := app.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "ReplicaSecret") {
		t.Errorf("app.New with authentication on Redis, no secret: %v, want an error naming ReplicaSecret", err)
	}
}
