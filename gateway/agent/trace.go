package agent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceMeta returns the W3C trace context of ctx as ACP `_meta` keys
// (`traceparent`, `tracestate`), which ACP reserves for it, or nil when ctx
// carries no valid span context.
func traceMeta(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier
}
