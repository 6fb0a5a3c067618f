package dockertest

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamInfo looks stream up in js and reads its info now, within ctx; it
// returns the stream for further reads, and an error naming the stream.
func StreamInfo(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.Stream, *jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s info: %w", stream, err)
	}
	return s, info, nil
}
