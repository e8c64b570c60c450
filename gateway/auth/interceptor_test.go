package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// userHeader is the response header in which userService's Watch reports
// the user it sees.
const userHeader = "Test-User"

// userService reports the user in its context: ListSessions as the id of
// its one session, Watch in a response header before one heartbeat.
type userService struct {
	acpv2connect.UnimplementedSessionServiceHandler
}

func (userService) ListSessions(ctx context.Context, _ *connect.Request[acpv2.ListSessionsRequest]) (*connect.Response[acpv2.ListSessionsResponse], error) {
	return connect.NewResponse(&acpv2.ListSessionsResponse{
		Sessions: []*acpv2.SessionSummary{{SessionId: auth.User(ctx)}},
	}), nil
}

func (userService) Watch(ctx context.Context, _ *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	stream.ResponseHeader().Set(userHeader, auth.User(ctx))
	return stream.Send(&acpv2.WatchResponse{Heartbeat: timestamppb.Now()})
}

// newServer serves userService over HTTP/2 with TLS, so that every Connect
// protocol works, with the given handler options.
func newServer(t *testing.T, opts ...connect.HandlerOption) *httptest.Server {
	t.Helper()
	return newWrappedServer(t, nil, opts...)
}

// newWrappedServer is newServer with the service's handler wrapped in
// wrap, unless nil.
func newWrappedServer(t *testing.T, wrap func(http.Handler) http.Handler, opts ...connect.HandlerOption) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	path, h := acpv2connect.NewSessionServiceHandler(userService{}, opts...)
	if wrap != nil {
		h = wrap(h)
	}
	mux.Handle(path, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// protocols are the client options of each Connect protocol.
var protocols = []struct {
	name string
	opt  connect.ClientOption
}{
	{"connect", connect.WithProtoJSON()},
	{"grpc", connect.WithGRPC()},
	{"grpcweb", connect.WithGRPCWeb()},
}

// callBoth calls ListSessions and Watch with the Authorization value authz
// (none when empty) and returns the user each saw, or its error.
func callBoth(t *testing.T, client acpv2connect.SessionServiceClient, authz string) (listUser string, listErr error, watchUser string, watchErr error) {
	t.Helper()
	listReq := connect.NewRequest(&acpv2.ListSessionsRequest{})
	watchReq := connect.NewRequest(&acpv2.WatchRequest{SessionId: "s"})
	if authz != "" {
		listReq.Header().Set("Authorization", authz)
		watchReq.Header().Set("Authorization", authz)
	}
	if resp, err := client.ListSessions(t.Context(), listReq); err != nil {
		listErr = err
	} else if n := len(resp.Msg.GetSessions()); n != 1 {
		t.Fatalf("ListSessions returned %d sessions, want 1", n)
	} else {
		listUser = resp.Msg.GetSessions()[0].GetSessionId()
	}

	stream, err := client.Watch(t.Context(), watchReq)
	if err != nil {
		return listUser, listErr, "", err
	}
	defer stream.Close()
	if stream.Receive() {
		watchUser = stream.ResponseHeader().Get(userHeader)
	} else if watchErr = stream.Err(); watchErr == nil {
		t.Fatal("Watch ended without a message or an error")
	}
	return listUser, listErr, watchUser, watchErr
}

func TestInterceptor(t *testing.T) {
	t.Parallel()
	k := testKeys()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	oidc := newTestOIDC(t, auth.OIDCConfig{Audience: testAudience})
	a := auth.Chain(tokens, oidc)
	// The interceptor, and the middleware, which answers before connect-go
	// reads a request (with no interceptor behind it, it alone names the
	// user).
	fronts := map[string]*httptest.Server{
		"interceptor": newServer(t, connect.WithInterceptors(auth.NewInterceptor(a))),
		"middleware":  newWrappedServer(t, func(h http.Handler) http.Handler { return auth.Middleware(a, h, nil) }),
	}
	jwt := sign(t, jose.RS256, k.rsa, "rsa1", claims("bob"))
	expired := sign(t, jose.RS256, k.rsa, "rsa1", claims("bob", func(c map[string]any) { c["exp"] = 1 }))

	tests := []struct {
		name    string
		authz   string
		want    string // the user; "" means unauthenticated
		wantMsg string
	}{
		{"no header", "", "", "unauthenticated: missing or malformed bearer token in the Authorization header"},
		{"unknown token", "Bearer wrong-token-0123456789", "", "unauthenticated: unknown bearer token"},
		{"basic scheme", "Basic static-token-0123456789", "", "unauthenticated: missing or malformed bearer token in the Authorization header"},
		{"expired JWT", "Bearer " + expired, "", "unauthenticated: token expired"},
		{"static token", "Bearer static-token-0123456789", "alice", ""},
		{"JWT", "Bearer " + jwt, "bob", ""},
	}
	for front, srv := range fronts {
		for _, p := range protocols {
			client := acpv2connect.NewSessionServiceClient(srv.Client(), srv.URL, p.opt)
			for _, tt := range tests {
				t.Run(front+"/"+p.name+"/"+tt.name, func(t *testing.T) {
					t.Parallel()
					listUser, listErr, watchUser, watchErr := callBoth(t, client, tt.authz)
					for _, call := range []struct {
						rpc  string
						user string
						err  error
					}{{"ListSessions", listUser, listErr}, {"Watch", watchUser, watchErr}} {
						if tt.want != "" {
							if call.err != nil || call.user != tt.want {
								t.Errorf("%s: user %q, error %v; want %q", call.rpc, call.user, call.err, tt.want)
							}
							continue
						}
						var cerr *connect.Error
						if !errors.As(call.err, &cerr) || cerr.Code() != connect.CodeUnauthenticated {
							t.Errorf("%s: user %q, error %v; want code unauthenticated", call.rpc, call.user, call.err)
							continue
						}
						if got := cerr.Message(); got != tt.wantMsg {
							t.Errorf("%s: message %q, want %q", call.rpc, got, tt.wantMsg)
						}
						if got := cerr.Meta().Values("WWW-Authenticate"); len(got) != 1 || got[0] != "Bearer" {
							t.Errorf("%s: WWW-Authenticate %q, want [Bearer]", call.rpc, got)
						}
					}
				})
			}
		}
	}
}

// readCounter counts the reads of a request body.
type readCounter struct{ reads int }

func (r *readCounter) Read([]byte) (int, error) { r.reads++; return 0, errors.New("read") }

// The middleware answers an unauthenticated request without reading its
// body, in the request's protocol, and tells of it.
func TestMiddlewareReadsNoBodyOfARefusedRequest(t *testing.T) {
	t.Parallel()
	tokens, _ := loadTokens(t, "static-token-0123456789 alice\n")
	var refused []error
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("an unauthenticated request was let through") })
	h := auth.Middleware(tokens, next, func(_ *http.Request, err error) { refused = append(refused, err) })
	for contentType, status := range map[string]int{"application/proto": http.StatusUnauthorized, "application/grpc": http.StatusOK,
		"application/grpc-web+proto": http.StatusOK, "application/connect+json": http.StatusOK} {
		body := &readCounter{}
		req := httptest.NewRequest(http.MethodPost, acpv2connect.SessionServiceGetSessionProcedure, body)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer wrong")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if body.reads != 0 || w.Code != status || w.Header().Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s: %d reads of the body, status %d, WWW-Authenticate %q; want none, %d, Bearer",
				contentType, body.reads, w.Code, w.Header().Get("WWW-Authenticate"), status)
		}
	}
	if len(refused) != 4 || connect.CodeOf(refused[0]) != connect.CodeUnauthenticated {
		t.Errorf("refused was told %v", refused)
	}
}

// TestInterceptorUnsafeError checks that an authenticator's error that does
// not wrap ErrUnauthenticated is neither shown to the client nor let through.
func TestInterceptorUnsafeError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		auth auth.Authenticator
	}{
		{"plain error", authFunc(func(context.Context, http.Header) (string, error) { return "", errBroken })},
		{"user and error", authFunc(func(context.Context, http.Header) (string, error) { return "alice", errBroken })},
		{"no user no error", authFunc(func(context.Context, http.Header) (string, error) { return "", nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, connect.WithInterceptors(auth.NewInterceptor(tt.auth)))
			client := acpv2connect.NewSessionServiceClient(srv.Client(), srv.URL)
			_, listErr, _, watchErr := callBoth(t, client, "Bearer x")
			for _, err := range []error{listErr, watchErr} {
				var cerr *connect.Error
				if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnauthenticated || cerr.Message() != "unauthenticated" {
					t.Errorf("error %v, want code unauthenticated with a generic message", err)
				}
			}
		})
	}
}

// TestInterceptorClientPassThrough checks that the interceptor on a client
// neither authenticates nor changes calls.
func TestInterceptorClientPassThrough(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	reject := authFunc(func(context.Context, http.Header) (string, error) { return "", errBroken })
	client := acpv2connect.NewSessionServiceClient(srv.Client(), srv.URL,
		connect.WithInterceptors(auth.NewInterceptor(reject)))
	_, listErr, _, watchErr := callBoth(t, client, "")
	if listErr != nil || watchErr != nil {
		t.Fatalf("ListSessions error %v, Watch error %v; want none", listErr, watchErr)
	}
}
