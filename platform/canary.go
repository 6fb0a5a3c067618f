package platform

import "github.com/nats-io/nats.go"

// Canaries (platform/canary) are ordinary stored events and jobs with
// header Platform-Canary: true. The consumer runtime acks them without
// calling the handler; a consumer not built on it must ack messages whose
// IsCanary is true without processing them. A topic or queue opts out
// with canary: false, recorded on its stream as platform.canary: off.

// CanaryHeader marks a canary event or job.
const CanaryHeader = "Platform-Canary"

// IsCanary reports whether headers mark a canary.
func IsCanary(h nats.Header) bool {
	return h != nil && h.Get(CanaryHeader) == "true"
}

// canaryOff is the metadata value (platform.canary) of an opted-out topic
// or queue.
const canaryOff = "off"

func canaryFromMetadata(md map[string]string) *bool {
	if md[mdCanary] != canaryOff {
		return nil
	}
	off := false
	return &off
}
