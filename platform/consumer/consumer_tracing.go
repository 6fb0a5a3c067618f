package consumer

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgplatform/platform/platform"
)

// consumeSpan ends a handler's span with its result.
type consumeSpan struct{ span trace.Span }

func (s consumeSpan) end(err error) {
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// startConsumeSpan starts the consumer span of one delivery as a child of
// the producer's trace.
func startConsumeSpan(ctx context.Context, m *Message, consumer string) (context.Context, consumeSpan) {
	ctx = platform.ExtractTrace(ctx, m.Header)
	ctx, span := otel.Tracer(platform.TracerName).Start(ctx, "process "+m.Subject,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", m.Subject),
			attribute.String("messaging.consumer.group.name", consumer),
			attribute.Int64("messaging.nats.stream_sequence", int64(m.Seq)),
			attribute.Int("messaging.delivery.attempt", m.Attempt),
		))
	return ctx, consumeSpan{span: span}
}

// trace runs the rest of the chain in the consumer span of the delivery,
// ended with the error it returns, and records the time it took.
func (s *settler) trace(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		ctx, span := startConsumeSpan(ctx, m, s.group)
		start := time.Now()
		err := next(ctx, m)
		span.end(err)
		s.metrics.handled(s.group, s.partition, time.Since(start))
		return err
	}
}
