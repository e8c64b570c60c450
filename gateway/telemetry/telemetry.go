// Package telemetry carries W3C trace context through the gateway and, when
// an OTLP endpoint is configured, exports spans of every call with
// OpenTelemetry (otelconnect).
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// propagator reads and writes W3C trace context (traceparent, tracestate)
// and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracing is the gateway's tracing set-up.
type Tracing struct {
	// Interceptor carries the caller's trace context into each call's
	// context and, when exporting, starts a server span for it.
	Interceptor connect.Interceptor
	// Exporting says whether spans are exported.
	Exporting bool
	provider  *sdktrace.TracerProvider
}

// Endpoint returns the OTLP/HTTP traces endpoint to use: flag when set,
// else the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as it is, or
// OTEL_EXPORTER_OTLP_ENDPOINT, a base URL under whose path the traces go
// (at v1/traces, as the OpenTelemetry specification has it); "" means no
// export.
func Endpoint(flag string) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	if v := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		u, err := url.Parse(v)
		if err != nil {
			return v // for New to refuse
		}
		return u.JoinPath("v1/traces").String()
	}
	return ""
}

// New sets up tracing. With endpoint "" nothing is exported, but incoming
// trace context still reaches the agents. Otherwise spans go by OTLP/HTTP
// to endpoint, a URL such as http://collector:4318/v1/traces (a URL
// without a path gets /v1/traces).
func New(ctx context.Context, endpoint string) (*Tracing, error) {
	if endpoint == "" {
		return &Tracing{Interceptor: extractor{}}, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http or https URL", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("acp-gateway")))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	)
	ic, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(tp),
		otelconnect.WithPropagator(propagator),
		otelconnect.WithMeterProvider(noopmetric.NewMeterProvider()), // metrics are Prometheus's
		otelconnect.WithTrustRemote(),
	)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, err
	}
	return &Tracing{Interceptor: ic, Exporting: true, provider: tp}, nil
}

// Shutdown flushes and stops the exporter, if any.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ForceFlush exports the spans that ended, if exporting.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// extractor puts a call's incoming trace context in its context, without
// starting spans.
type extractor struct{}

func (extractor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			ctx = propagator.Extract(ctx, propagation.HeaderCarrier(req.Header()))
		}
		return next(ctx, req)
	}
}

func (extractor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (extractor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(propagator.Extract(ctx, propagation.HeaderCarrier(conn.RequestHeader())), conn)
	}
}
