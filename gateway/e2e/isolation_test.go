package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// clientsAs returns a client of each protocol that sends token.
func (g *gateway) clientsAs(t *testing.T, token string) map[string]acpv2connect.SessionServiceClient {
	t.Helper()
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{}
	h2 := &http.Transport{Protocols: h2c}
	t.Cleanup(func() {
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
	})
	c1 := &http.Client{Transport: bearer{token, h1}}
	c2 := &http.Client{Transport: bearer{token, h2}}
	return map[string]acpv2connect.SessionServiceClient{
		"connect+json":  acpv2connect.NewSessionServiceClient(c1, g.base, connect.WithProtoJSON()),
		"connect+proto": acpv2connect.NewSessionServiceClient(c1, g.base),
		"grpc":          acpv2connect.NewSessionServiceClient(c2, g.base, connect.WithGRPC()),
		"grpc-web":      acpv2connect.NewSessionServiceClient(c1, g.base, connect.WithGRPCWeb()),
	}
}

func tokenFile(t *testing.T, lines ...string) *auth.Tokens {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# test users\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// everyRPC calls each RPC of the service on session id (streams are read
// to their end or first error) and returns each call's error by name.
func everyRPC(c acpv2connect.SessionServiceClient, id, requestID string) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drain := func(s interface {
		Receive() bool
		Err() error
		Close() error
	}, err error) error {
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	errs := map[string]error{}
	_, errs["GetSession"] = c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	_, errs["Cancel"] = c.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: id}))
	_, errs["RespondPermission"] = c.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
		SessionId: id, RequestId: requestID, OptionId: "allow-once"}))
	_, errs["SetMode"] = c.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: id, ModeId: "code"}))
	_, errs["SetConfigOption"] = c.SetConfigOption(ctx, connect.NewRequest(&acpv2.SetConfigOptionRequest{
		SessionId: id, ConfigId: "model", Value: &acpv2.SetConfigOptionRequest_ValueId{ValueId: "fast"}}))
	ps, err := c.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("hi")}))
	errs["Prompt"] = drain(ps, err)
	ws, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	errs["Watch"] = drain(ws, err)
	_, errs["Logout"] = c.Logout(ctx, connect.NewRequest(&acpv2.LogoutRequest{SessionId: id}))
	_, errs["CloseSession"] = c.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	return errs
}

func TestUsersNeverReachEachOthersSessions(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{auth: tokenFile(t, "tok-alice-0123456789 alice", "tok-bob-0123456789  bob"), anyCwd: true})
	alice := g.clientsAs(t, "tok-alice-0123456789")["connect+json"]
	ctx := context.Background()
	res, err := alice.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()

	// Alice's turn waits on a permission request while Bob tries everything.
	stream, err := alice.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var requestID string
	for requestID == "" && stream.Receive() {
		requestID = stream.Msg().GetEvent().GetPermissionRequest().GetRequestId()
	}
	if requestID == "" {
		t.Fatalf("no permission request: %v", stream.Err())
	}

	for proto, bob := range g.clientsAs(t, "tok-bob-0123456789") {
		t.Run(proto, func(t *testing.T) {
			hers := everyRPC(bob, id, requestID)
			nobody := everyRPC(bob, "s_000000000000000000000000", requestID)
			for rpc, err := range hers {
				if codeOf(err) != connect.CodeNotFound {
					t.Errorf("Bob's %s on Alice's session: %v, want not_found", rpc, err)
					continue
				}
				// Nothing tells her session from one that does not exist.
				a := strings.ReplaceAll(err.Error(), id, "ID")
				b := strings.ReplaceAll(nobody[rpc].Error(), "s_000000000000000000000000", "ID")
				if a != b {
					t.Errorf("Bob's %s: %q on Alice's session, %q on none", rpc, a, b)
				}
			}
			list, err := bob.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range list.Msg.GetSessions() {
				if s.GetSessionId() == id {
					t.Errorf("Bob's ListSessions shows Alice's session")
				}
			}
		})
	}

	// Bob's own session is his alone too.
	bob := g.clientsAs(t, "tok-bob-0123456789")["grpc"]
	bres, err := bob.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: bres.Msg.GetSessionId()})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Alice's GetSession of Bob's session: %v, want not_found", err)
	}
	for who, c := range map[string]acpv2connect.SessionServiceClient{"alice": alice, "bob": bob} {
		list, err := c.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range list.Msg.GetSessions() {
			ids = append(ids, s.GetSessionId())
		}
		want := map[string]string{"alice": id, "bob": bres.Msg.GetSessionId()}[who]
		if !slices.Equal(ids, []string{want}) {
			t.Errorf("%s lists %v, want only %s", who, ids, want)
		}
	}

	// Nothing Bob did reached Alice's session: her turn goes on.
	if _, err := alice.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
		SessionId: id, RequestId: requestID, OptionId: "allow-once"})); err != nil {
		t.Fatalf("Alice's answer: %v", err)
	}
	var ended *acpv2.TurnEnded
	var resolved *acpv2.PermissionResolved
	for stream.Receive() {
		if e := stream.Msg().GetEvent().GetTurnEnded(); e != nil {
			ended = e
		}
		if r := stream.Msg().GetEvent().GetPermissionResolved(); r != nil {
			resolved = r
		}
	}
	if ended.GetStopReason() != "end_turn" {
		t.Fatalf("Alice's turn ended %v (%v)", ended, stream.Err())
	}
	if resolved.GetAnsweredBy() != "user:alice" {
		t.Errorf("the permission was answered by %q, want user:alice", resolved.GetAnsweredBy())
	}
	snap, err := alice.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil || snap.Msg.GetSession().GetState() != "ready" || snap.Msg.GetSession().GetToolCalls()[0].GetStatus() != "completed" {
		t.Fatalf("Alice's session after Bob's attempts: %v %v", snap.Msg.GetSession(), err)
	}
}

func TestEveryRPCNeedsAValidToken(t *testing.T) {
	t.Parallel()
	// Its 40 wrong guesses are not throttled, so that each RPC's answer shows.
	g := permissionGateway(t, gatewayOpts{auth: tokenFile(t, "tok-alice-0123456789 alice"), anyCwd: true, authFailureLimit: -1})
	for _, token := range []string{"", "tok-wrong-0123456789"} {
		for proto, c := range g.clientsAs(t, token) {
			errs := everyRPC(c, "s_000000000000000000000000", "perm-1")
			_, errs["CreateSession"] = c.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "perm", Cwd: t.TempDir()}))
			_, errs["ListSessions"] = c.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
			for rpc, err := range errs {
				if codeOf(err) != connect.CodeUnauthenticated {
					t.Errorf("%s with token %q, %s: %v, want unauthenticated", rpc, token, proto, err)
				}
				if token != "" && strings.Contains(err.Error(), token) {
					t.Errorf("%s: the error shows the token: %v", rpc, err)
				}
			}
		}
	}
	// Health and metrics need no token.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		res, err := http.Get(g.base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %s", path, res.Status)
		}
	}
	// Nothing was created by the refused calls.
	list, err := g.clientsAs(t, "tok-alice-0123456789")["connect+json"].ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 0 {
		t.Fatalf("sessions after refused calls: %v %v", list, err)
	}
}
