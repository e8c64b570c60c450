package telemetry_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/telemetry"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + parentSpan + "-01"
)

// seen records the span context each call's handler saw.
type seen struct {
	acpv2connect.UnimplementedSessionServiceHandler
	mu  sync.Mutex
	got []trace.SpanContext
}

func (s *seen) ListSessions(ctx context.Context, _ *connect.Request[acpv2.ListSessionsRequest]) (*connect.Response[acpv2.ListSessionsResponse], error) {
	s.mu.Lock()
	s.got = append(s.got, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	return connect.NewResponse(&acpv2.ListSessionsResponse{}), nil
}

func (s *seen) Watch(ctx context.Context, _ *connect.Request[acpv2.WatchRequest], _ *connect.ServerStream[acpv2.WatchResponse]) error {
	s.mu.Lock()
	s.got = append(s.got, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	return nil
}

// call makes one unary and one streaming call with a traceparent header.
func call(t *testing.T, ic connect.Interceptor) *seen {
	t.Helper()
	h := &seen{}
	mux := http.NewServeMux()
	mux.Handle(acpv2connect.NewSessionServiceHandler(h, connect.WithInterceptors(ic)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := acpv2connect.NewSessionServiceClient(srv.Client(), srv.URL)
	req := connect.NewRequest(&acpv2.ListSessionsRequest{})
	req.Header().Set("traceparent", traceparent)
	if _, err := c.ListSessions(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	wreq := connect.NewRequest(&acpv2.WatchRequest{SessionId: "s"})
	wreq.Header().Set("traceparent", traceparent)
	stream, err := c.Watch(context.Background(), wreq)
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestTraceContextReachesHandlersWithoutAnExporter(t *testing.T) {
	t.Parallel()
	tr, err := telemetry.New(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Exporting {
		t.Fatal("exporting with no endpoint")
	}
	h := call(t, tr.Interceptor)
	if len(h.got) != 2 {
		t.Fatalf("handlers saw %d calls, want 2", len(h.got))
	}
	for _, sc := range h.got {
		if sc.TraceID().String() != traceID || sc.SpanID().String() != parentSpan {
			t.Errorf("handler saw trace %s span %s, want the caller's %s %s", sc.TraceID(), sc.SpanID(), traceID, parentSpan)
		}
	}
}

func TestSpansAreExportedByOTLP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var spans []string // "traceID parentSpanID name"
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					spans = append(spans, hex.EncodeToString(sp.GetTraceId())+" "+hex.EncodeToString(sp.GetParentSpanId())+" "+sp.GetName())
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer collector.Close()

	tr, err := telemetry.New(context.Background(), collector.URL) // no path: /v1/traces
	if err != nil {
		t.Fatal(err)
	}
	h := call(t, tr.Interceptor)
	for _, sc := range h.got {
		// The handler runs in the gateway's own span, a child of the caller's.
		if sc.TraceID().String() != traceID || sc.SpanID().String() == parentSpan {
			t.Errorf("handler saw trace %s span %s, want a child span in trace %s", sc.TraceID(), sc.SpanID(), traceID)
		}
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]bool{
		traceID + " " + parentSpan + " acp.v2.SessionService/ListSessions": false,
		traceID + " " + parentSpan + " acp.v2.SessionService/Watch":        false,
	}
	for _, s := range spans {
		if _, ok := want[s]; ok {
			want[s] = true
		}
	}
	for s, ok := range want {
		if !ok {
			t.Errorf("span %q not exported; got %q", s, spans)
		}
	}
}

func TestBadEndpointIsRefused(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"collector:4318", "ftp://x/v1/traces", "http://"} {
		if _, err := telemetry.New(context.Background(), e); err == nil {
			t.Errorf("endpoint %q accepted", e)
		}
	}
}

func TestEndpoint(t *testing.T) {
	for _, tt := range []struct {
		flag, traces, base, want string
	}{
		{want: ""},
		{flag: "http://flag:4318", traces: "http://t:4318/x", base: "http://b:4318", want: "http://flag:4318"},
		{traces: "http://t:4318/custom", base: "http://b:4318", want: "http://t:4318/custom"},
		{base: "http://b:4318", want: "http://b:4318/v1/traces"},
		{base: "http://b:4318/", want: "http://b:4318/v1/traces"},
		{base: "https://b/otlp/", want: "https://b/otlp/v1/traces"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tt.traces)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tt.base)
		if got := telemetry.Endpoint(tt.flag); got != tt.want {
			t.Errorf("Endpoint(%q) with traces %q, base %q = %q, want %q", tt.flag, tt.traces, tt.base, got, tt.want)
		}
	}
}
