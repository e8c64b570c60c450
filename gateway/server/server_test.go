package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/flush"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// start serves svc on a loopback port until the test ends, and returns
// the server's base URL.
func start(t *testing.T, svc acpv2connect.SessionServiceHandler, opts server.Options) string {
	t.Helper()
	srv := server.New(svc, opts)
	base, _ := testutil.Serve(t, srv.Serve, srv.Shutdown)
	return base
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	base := start(t, acpv2connect.UnimplementedSessionServiceHandler{}, server.Options{Ready: ready.Load})
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
	// grpc.health.v1 over the Connect protocol: a plain JSON POST. It
	// follows readiness, as /readyz does.
	health := func() string {
		resp, err := http.Post(base+"/grpc.health.v1.Health/Check", "application/json",
			strings.NewReader(`{"service":"`+acpv2connect.SessionServiceName+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Status string }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("health check: %s, %v", resp.Status, err)
		}
		return out.Status
	}
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before ready = %d", got)
	}
	if got := health(); got != "SERVING_STATUS_NOT_SERVING" {
		t.Fatalf("gRPC health before ready = %q", got)
	}
	ready.Store(true)
	if got := get("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz when ready = %d", got)
	}
	if got := health(); got != "SERVING_STATUS_SERVING" {
		t.Fatalf("gRPC health when ready = %q", got)
	}
}

func TestCORSAllowsOnlyListedOrigins(t *testing.T) {
	t.Parallel()
	base := start(t, acpv2connect.UnimplementedSessionServiceHandler{}, server.Options{CORSOrigins: []string{"https://app.example.com"}})
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
	base := start(t, acpv2connect.UnimplementedSessionServiceHandler{}, server.Options{})
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
	base := start(t, sized{}, server.Options{})
	encoding := func(size int) string {
		req, _ := http.NewRequest(http.MethodPost, base+"/acp.v2.SessionService/GetSession",
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

// holding is a SessionService whose Watch sends three events with their
// flushes held, then fails with a code and a trailer; GetSession tells
// whether its response could hold flushes.
type holding struct {
	acpv2connect.UnimplementedSessionServiceHandler
}

func (holding) Watch(ctx context.Context, _ *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	fw := flush.From(ctx)
	if fw == nil {
		return connect.NewError(connect.CodeInternal, errors.New("a server stream cannot hold its flushes"))
	}
	fw.Hold()
	for i := range 3 {
		if err := stream.Send(&acpv2.WatchResponse{Event: &acpv2.SessionEvent{Seq: uint64(i + 1)}}); err != nil {
			return err
		}
	}
	if err := fw.Release(); err != nil {
		return err
	}
	stream.ResponseTrailer().Set("Acp-Test", "kept")
	return connect.NewError(connect.CodeAborted, errors.New("the end"))
}

func (holding) GetSession(ctx context.Context, _ *connect.Request[acpv2.GetSessionRequest]) (*connect.Response[acpv2.GetSessionResponse], error) {
	if flush.From(ctx) != nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("a unary call got a holdable writer"))
	}
	return connect.NewResponse(&acpv2.GetSessionResponse{}), nil
}

// The server streams' responses can hold flushes, over every protocol and
// transport, and their messages, error and trailers still arrive.
func TestServerStreamsCanHoldFlushes(t *testing.T) {
	t.Parallel()
	base := start(t, holding{}, server.Options{})
	h1 := &http.Client{Transport: &http.Transport{}}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: p}}
	for name, c := range map[string]acpv2connect.SessionServiceClient{
		"connect+proto over HTTP/1.1": acpv2connect.NewSessionServiceClient(h1, base),
		"connect+json over h2c":       acpv2connect.NewSessionServiceClient(h2, base, connect.WithProtoJSON()),
		"grpc over h2c":               acpv2connect.NewSessionServiceClient(h2, base, connect.WithGRPC()),
		"grpc-web over HTTP/1.1":      acpv2connect.NewSessionServiceClient(h1, base, connect.WithGRPCWeb()),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: "s"})); err != nil {
				t.Fatalf("GetSession: %v", err)
			}
			stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: "s"}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var seqs []uint64
			for stream.Receive() {
				seqs = append(seqs, stream.Msg().GetEvent().GetSeq())
			}
			if !slices.Equal(seqs, []uint64{1, 2, 3}) || connect.CodeOf(stream.Err()) != connect.CodeAborted {
				t.Fatalf("got %v, then %v; want 1, 2, 3, then aborted", seqs, stream.Err())
			}
			if got := stream.ResponseTrailer().Get("Acp-Test"); got != "kept" {
				t.Fatalf("trailer Acp-Test = %q", got)
			}
		})
	}
}

// manyKeys is an event whose Struct has enough keys that proto.Marshal,
// which writes map entries in random order, practically never writes it
// twice the same.
var manyKeys = func() *acpv2.SessionEvent {
	fields := map[string]any{}
	for i := range 20 {
		fields["k"+strconv.Itoa(i)] = float64(i)
	}
	meta, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Meta: meta}}}
}()

type repeating struct {
	acpv2connect.UnimplementedSessionServiceHandler
}

func (repeating) Watch(_ context.Context, _ *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	ev, err := encoded.New(manyKeys)
	if err != nil {
		return err
	}
	for range 3 {
		if err := stream.Conn().Send(&encoded.Reply{Message: &acpv2.WatchResponse{Event: manyKeys}, Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// The server's proto codec writes an encoded event as it is: every
// message that carries it has the same bytes, though proto.Marshal writes
// its map entries in a new order each time.
func TestStreamsSendAnEventsOneEncoding(t *testing.T) {
	t.Parallel()
	base := start(t, repeating{}, server.Options{})
	req, _ := proto.Marshal(&acpv2.WatchRequest{SessionId: "s"})
	resp, err := http.Post(base+acpv2connect.SessionServiceWatchProcedure, "application/connect+proto",
		bytes.NewReader(testutil.Envelope(0, req)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var first []byte
	for i := range 3 {
		flags, msg, err := testutil.ReadEnvelope(resp.Body)
		if err != nil || flags != 0 {
			t.Fatalf("message %d: flags %d, err %v", i, flags, err)
		}
		var m acpv2.WatchResponse
		if err := proto.Unmarshal(msg, &m); err != nil || !proto.Equal(m.GetEvent(), manyKeys) {
			t.Fatalf("message %d does not decode to the event: %v", i, err)
		}
		if first == nil {
			first = msg
		} else if !bytes.Equal(msg, first) {
			t.Fatalf("message %d is encoded anew", i)
		}
	}
}
