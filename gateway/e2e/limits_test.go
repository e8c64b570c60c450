package e2e

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// wantExhausted fails the test unless err is resource_exhausted with a
// message containing about.
func wantExhausted(t *testing.T, what string, err error, about string) {
	t.Helper()
	if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), about) {
		t.Fatalf("%s: %v, want resource_exhausted saying %q", what, err, about)
	}
}

func TestSessionLimitsPerUserAndPerGateway(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{
		auth:            tokenFile(t, "tok-a-0123456789 a", "tok-b-0123456789 b", "tok-c-0123456789 c"),
		anyCwd:          true,
		maxUserSessions: 2,
		maxSessions:     3,
	})
	ctx := context.Background()
	create := func(token string) (string, error) {
		res, err := g.clientsAs(t, token)["connect+json"].CreateSession(ctx,
			connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
		if err != nil {
			return "", err
		}
		return res.Msg.GetSessionId(), nil
	}
	a1, err := create("tok-a-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create("tok-a-0123456789"); err != nil {
		t.Fatal(err)
	}
	_, err = create("tok-a-0123456789")
	wantExhausted(t, "a third session of one user", err, "limit per user")
	if _, err := create("tok-b-0123456789"); err != nil {
		t.Fatalf("another user is not held back by a's limit: %v", err)
	}
	_, err = create("tok-c-0123456789")
	wantExhausted(t, "a fourth session on the gateway", err, "this gateway runs 3 sessions")

	// Closing frees a place, for the user and the gateway.
	if _, err := g.clientsAs(t, "tok-a-0123456789")["connect+json"].CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: a1})); err != nil {
		t.Fatal(err)
	}
	if _, err := create("tok-a-0123456789"); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
}

func TestPromptAndMessageSizeLimits(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{maxPromptBytes: 1000, readMaxBytes: 64 << 10})
	id := g.create(t, "perm")
	wantExhausted(t, "a prompt over --max-prompt-bytes", promptErr(g, id, strings.Repeat("x", 2000)), "at most 1000 bytes")
	// A request over the message limit is refused before it is decoded.
	err := promptErr(g, id, strings.Repeat("x", 100<<10))
	if codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a request over the message limit: %v, want resource_exhausted", err)
	}
	// The session is unharmed.
	if got := snapshot(t, g, id).GetLastSeq(); got != 0 {
		t.Fatalf("refused prompts left events: last seq %d", got)
	}
}

func TestRateLimitPerUser(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{
		auth:      tokenFile(t, "tok-a-0123456789 a", "tok-b-0123456789 b"),
		anyCwd:    true,
		rateLimit: 0.001, // no refill within the test
		rateBurst: 3,
	})
	ctx := context.Background()
	list := func(token string) error {
		_, err := g.clientsAs(t, token)["grpc"].ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
		return err
	}
	for i := range 3 {
		if err := list("tok-a-0123456789"); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	wantExhausted(t, "a call over the burst", list("tok-a-0123456789"), "too many requests")
	if err := list("tok-b-0123456789"); err != nil {
		t.Fatalf("another user is not held back: %v", err)
	}
}

// A user's Prompt and Watch streams are counted: past the limit one is
// refused, another user's are not, and an ended stream makes room.
func TestStreamLimitPerUser(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{auth: tokenFile(t, "tok-a-0123456789 a", "tok-b-0123456789 b"), anyCwd: true, maxUserStreams: 3})
	ctx := context.Background()
	watch := func(token, id string) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		stream, err := g.clientsAs(t, token)["grpc"].Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
		if err == nil && !stream.Receive() { // the opening heartbeat, or the refusal
			err = stream.Err()
		}
		if err != nil {
			cancel()
			return nil, err
		}
		return func() { cancel(); stream.Close() }, nil
	}
	ids := map[string]string{}
	for _, token := range []string{"tok-a-0123456789", "tok-b-0123456789"} {
		res, err := g.clientsAs(t, token)["connect+json"].CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
		if err != nil {
			t.Fatal(err)
		}
		ids[token] = res.Msg.GetSessionId()
	}
	var open []func()
	defer func() {
		for _, end := range open {
			end()
		}
	}()
	for i := range 3 {
		end, err := watch("tok-a-0123456789", ids["tok-a-0123456789"])
		if err != nil {
			t.Fatalf("stream %d within the limit: %v", i+1, err)
		}
		open = append(open, end)
	}
	_, err := watch("tok-a-0123456789", ids["tok-a-0123456789"])
	wantExhausted(t, "a fourth stream", err, "3 Prompt and Watch streams of yours are open")
	// A prompt is a stream too.
	prompt, err := g.clientsAs(t, "tok-a-0123456789")["connect+json"].Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: ids["tok-a-0123456789"], Prompt: textPrompt("go")}))
	if err == nil {
		for prompt.Receive() {
		}
		err = prompt.Err()
		prompt.Close()
	}
	wantExhausted(t, "a prompt past the limit", err, "streams of yours")
	end, err := watch("tok-b-0123456789", ids["tok-b-0123456789"])
	if err != nil {
		t.Fatalf("another user is not held back: %v", err)
	}
	end()
	open[0]()
	open = open[1:]
	testutil.WaitFor(t, "a place after a stream ended", func() bool {
		end, err := watch("tok-a-0123456789", ids["tok-a-0123456789"])
		if err == nil {
			open = append(open, end)
		}
		return err == nil
	})
}
