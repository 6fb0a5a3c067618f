package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
)

// redriveForOther reports whether m is a redriven event meant for
// another group of the same topic. A queue has one consumer, so it never
// skips; nor does a group when the named group does not consume this
// topic (a redrive sent to another destination is for its consumers).
func (s *settler) redriveForOther(m *Message) bool {
	g := m.Header.Get(platform.HeaderRedriveGroup)
	if g == "" || g == s.group || s.partition == "" {
		return false
	}
	return s.groupConsumes(g)
}

// groupConsumes reports whether group has a partition consumer on s's
// topic (cached; on a lookup error it answers false, uncached: better a
// repeat the handler can catch than an event no group handles).
func (s *settler) groupConsumes(group string) bool {
	s.mu.Lock()
	known, ok := s.groups[group]
	s.mu.Unlock()
	if ok {
		return known
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, s.stream, platform.PartitionConsumer(group, 0))
	switch {
	case err == nil:
		known = c.CachedInfo().Config.Metadata[platform.MetaGroup] == group
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		known = false
	default:
		return false
	}
	s.mu.Lock()
	if s.groups == nil {
		s.groups = map[string]bool{}
	}
	s.groups[group] = known
	s.mu.Unlock()
	return known
}

// skipRedrive acknowledges a redriven event meant for another group
// without passing it on (or leaves it alone if fenced: the next owner
// skips it).
func (s *settler) skipRedrive(next Handler) Handler {
	return s.skip(next, s.redriveForOther, func() { s.metrics.redriveSkipped(s.group, s.partition) })
}

func newRedriveSkippedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "platform_consumer_redrive_skipped_total",
		Help: "Redriven events acknowledged without calling the handler: their Platform-Redrive-Group names another group.",
	}, []string{"group", "partition"})
}

// redriveSkipped is a no-op on a nil *Metrics.
func (c *Metrics) redriveSkipped(group, partition string) {
	if c != nil {
		c.redriveSkippedC.WithLabelValues(group, partition).Inc()
	}
}
