package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

func start(t *testing.T, opts server.Options) string {
	t.Helper()
	srv := server.New(acpv2connect.UnimplementedSessionServiceHandler{}, opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + l.Addr().String()
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	base := start(t, server.Options{Ready: ready.Load})
	get := func(path string) int {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d", got)
	}
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before ready = %d", got)
	}
	ready.Store(true)
	if got := get("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz when ready = %d", got)
	}

	// grpc.health.v1 over the Connect protocol: a plain JSON POST.
	resp, err := http.Post(base+"/grpc.health.v1.Health/Check", "application/json",
		strings.NewReader(`{"service":"`+acpv2connect.SessionServiceName+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "SERVING") {
		t.Fatalf("health check: %s %s", resp.Status, body)
	}
}

func TestCORSAllowsOnlyListedOrigins(t *testing.T) {
	t.Parallel()
	base := start(t, server.Options{CORSOrigins: []string{"https://app.example.com"}})
	preflight := func(origin string) string {
		req, _ := http.NewRequest(http.MethodOptions, base+"/acp.v2.SessionService/GetSession", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		// As browsers send it: sorted and in lower case.
		req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("Access-Control-Allow-Origin")
	}
	if got := preflight("https://app.example.com"); got != "https://app.example.com" {
		t.Fatalf("listed origin: Access-Control-Allow-Origin = %q", got)
	}
	if got := preflight("https://evil.example.com"); got != "" {
		t.Fatalf("unlisted origin allowed: %q", got)
	}
	// A browser may read the request id and the auth challenge, and is
	// never asked to send cookies.
	req, _ := http.NewRequest(http.MethodPost, base+"/acp.v2.SessionService/GetSession", strings.NewReader("{}"))
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	exposed := strings.ToLower(strings.Join(resp.Header.Values("Access-Control-Expose-Headers"), ","))
	for _, h := range []string{"x-request-id", "www-authenticate", "grpc-status"} {
		if !strings.Contains(exposed, h) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
		}
	}
	if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("Access-Control-Allow-Credentials = %q", got)
	}
}

func TestReflectionListsTheService(t *testing.T) {
	t.Parallel()
	base := start(t, server.Options{})
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	client := grpcreflect.NewClient(&http.Client{Transport: &http.Transport{Protocols: h2c}}, base, connect.WithGRPC())
	stream := client.NewStream(context.Background())
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, protoreflect.FullName(acpv2connect.SessionServiceName)) {
		t.Fatalf("reflection lists %v", names)
	}
}

// sized answers GetSession with a snapshot whose cwd is as long as the
// session id says.
type sized struct {
	acpv2connect.UnimplementedSessionServiceHandler
}

func (sized) GetSession(_ context.Context, req *connect.Request[acpv2.GetSessionRequest]) (*connect.Response[acpv2.GetSessionResponse], error) {
	n, _ := strconv.Atoi(req.Msg.GetSessionId())
	return connect.NewResponse(&acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{Cwd: strings.Repeat("x", n)}}), nil
}

func TestOnlyLargeResponsesAreCompressed(t *testing.T) {
	t.Parallel()
	srv := server.New(sized{}, server.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	encoding := func(size int) string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+l.Addr().String()+"/acp.v2.SessionService/GetSession",
			strings.NewReader(`{"sessionId":"`+strconv.Itoa(size)+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		// A transport that leaves the body and its encoding as sent.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GetSession: %s", resp.Status)
		}
		return resp.Header.Get("Content-Encoding")
	}
	if got := encoding(100); got != "" {
		t.Errorf("a small response was sent with Content-Encoding %q", got)
	}
	if got := encoding(64 << 10); got != "gzip" {
		t.Errorf("a 64 KiB response was sent with Content-Encoding %q, want gzip", got)
	}
}
