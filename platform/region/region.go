package region

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// Control API subjects of the regional features (relative to the control
// API prefix, platform.v1), served by platformd in mode regions and in mode
// node with regions.peers (the other regions' client URLs).
const (
	SubjMirror       = "region.mirror"        // MirrorRequest -> MirrorStatus
	SubjMirrors      = "region.mirrors"       // {} -> []MirrorStatus
	SubjList         = "region.list"          // {} -> []Info
	SubjReport       = "residency.report"     // {} -> Report
	SubjCheck        = "residency.check"      // StreamCheckRequest -> {}
	SubjTopicMirrors = "region.topic_mirrors" // {"name"} -> []MirrorStatus
	SubjFailover     = "region.failover"      // FailoverRequest -> Failover
	SubjFailback     = "region.failback"      // FailbackRequest -> Failback
	SubjAudit        = "residency.audit"      // AuditRequest -> []Refusal
)

// OpTimeout bounds a failover or failback request: both wait on a
// region that has just come back (stream leaders being elected, catch-up)
// and copy events, so they get longer than the control API's usual 30 s.
// platformctl waits at least as long for them.
const OpTimeout = 2 * time.Minute

// AuditRequest asks for the residency refusals recorded in
// Region's audit stream (every region when empty).
type AuditRequest struct {
	Region string `json:"region,omitempty"`
}

// Info is one region as `platformctl region list` shows it.
type Info struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
	Home   bool   `json:"home,omitempty"`
	// Streams is how many streams the region holds (-1: unreachable).
	Streams int    `json:"streams"`
	Error   string `json:"error,omitempty"`
}

// StreamCheckRequest asks whether a stream configuration may be created in
// Region under the residency policy (the control API's answer to a
// hand-written mirror or source).
type StreamCheckRequest struct {
	Region string                 `json:"region"`
	Config jetstream.StreamConfig `json:"config"`
}

// OfTopic is the region a topic is created in: its residency, or home
// for a topic without one.
func OfTopic(t platform.TopicSpec, home string) string {
	if t.Residency != "" {
		return t.Residency
	}
	return home
}

// OfQueue is the region a queue is created in: its residency, or home
// for a queue without one.
func OfQueue(q platform.QueueSpec, home string) string {
	if q.Residency != "" {
		return q.Residency
	}
	return home
}
