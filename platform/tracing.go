package platform

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace propagation is W3C Trace Context (traceparent, tracestate) in
// event headers, through OpenTelemetry: the Publisher injects the trace
// of its ctx, the consumer runtime extracts it and runs the handler in a
// consumer span that is its child. Spans are recorded by the global
// TracerProvider (otel.SetTracerProvider); without one, nothing is
// recorded but the handler's ctx still carries the producer's trace id.

// TracerName is the instrumentation name of the platform's spans.
const TracerName = "github.com/msgplatform/platform"

var traceContext = propagation.TraceContext{}

// headerCarrier adapts nats.Header to a propagation.TextMapCarrier. W3C
// header names are lower case; nats.Header keys are used as set.
type headerCarrier nats.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

func (c headerCarrier) Get(key string) string {
	if v := nats.Header(c)[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(c).Get(key)
}

func (c headerCarrier) Set(key, value string) { nats.Header(c)[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace writes the trace of ctx into h as traceparent/tracestate,
// unless h already carries a traceparent or ctx has no valid span.
func InjectTrace(ctx context.Context, h nats.Header) {
	if h == nil || headerCarrier(h).Get("traceparent") != "" {
		return
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, headerCarrier(h))
}

// ExtractTrace returns ctx with the remote span context carried by h (if
// any) as its parent.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier(h))
}
