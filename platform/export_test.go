package platform

import (
	"context"
	"fmt"
	"time"
)

// What the external tests (package platform_test) reach inside the
// package: they drive the canary against the consumer runtime, which
// imports platform, so they cannot be in package platform.

const (
	CanaryKeyPrefix  = canaryKeyPrefix
	CanaryQueueToken = canaryQueueToken
)

var TestCtx, TestLogger = testCtx, testLogger

// CheckNow reads the ack floors and updates the ages once.
func (c *Canary) CheckNow(ctx context.Context) error { return c.check(ctx) }

// PublishSlot publishes the canaries of slot.
func (c *Canary) PublishSlot(ctx context.Context, slot time.Time) { c.publish(ctx, slot) }

// Objects names the topics and queues the canary covers.
func (c *Canary) Objects() []string {
	var out []string
	for _, o := range c.objects {
		out = append(out, fmt.Sprintf("%+v", o))
	}
	return out
}

// Remembered counts the canaries remembered per partition.
func (c *Canary) Remembered() map[string]int {
	out := map[string]int{}
	for part, recs := range c.logs {
		out[fmt.Sprintf("%v", part)] = len(recs)
	}
	return out
}
