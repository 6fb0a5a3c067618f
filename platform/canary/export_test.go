package canary

import (
	"context"
	"fmt"
	"time"
)

// What the external tests (package canary_test) reach inside the
// package: they drive the Monitor against the consumer runtime.

const (
	KeyPrefix  = keyPrefix
	QueueToken = queueToken
)

// CheckNow reads the ack floors and updates the ages once.
func (c *Monitor) CheckNow(ctx context.Context) error { return c.check(ctx) }

// PublishSlot publishes the canaries of slot.
func (c *Monitor) PublishSlot(ctx context.Context, slot time.Time) { c.publish(ctx, slot) }

// Objects names the topics and queues the canary covers.
func (c *Monitor) Objects() []string {
	var out []string
	for _, o := range c.objects {
		out = append(out, fmt.Sprintf("%+v", o))
	}
	return out
}

// Remembered counts the canaries remembered per partition.
func (c *Monitor) Remembered() map[string]int {
	out := map[string]int{}
	for part, recs := range c.logs {
		out[fmt.Sprintf("%v", part)] = len(recs)
	}
	return out
}
