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
	SubjRegionMirror       = "region.mirror"        // MirrorRequest -> MirrorStatus
	SubjRegionMirrors      = "region.mirrors"       // {} -> []MirrorStatus
	SubjRegionList         = "region.list"          // {} -> []RegionInfo
	SubjResidencyReport    = "residency.report"     // {} -> ResidencyReport
	SubjResidencyCheck     = "residency.check"      // StreamCheckRequest -> {}
	SubjRegionTopicMirrors = "region.topic_mirrors" // {"name"} -> []MirrorStatus
	SubjRegionFailover     = "region.failover"      // FailoverRequest -> Failover
	SubjRegionFailback     = "region.failback"      // FailbackRequest -> Failback
	SubjResidencyAudit     = "residency.audit"      // ResidencyAuditRequest -> []ResidencyRefusal
)

// RegionOpTimeout bounds a failover or failback request: both wait on a
// region that has just come back (stream leaders being elected, catch-up)
// and copy events, so they get longer than the control API's usual 30 s.
// platformctl waits at least as long for them.
const RegionOpTimeout = 2 * time.Minute

// ResidencyAuditRequest asks for the residency refusals recorded in
// Region's audit stream (every region when empty).
type ResidencyAuditRequest struct {
	Region string `json:"region,omitempty"`
}

// RegionInfo is one region as `platformctl region list` shows it.
type RegionInfo struct {
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

// TopicRegion is the region a topic is created in: its residency, or home
// for a topic without one.
func TopicRegion(t platform.TopicSpec, home string) string {
	if t.Residency != "" {
		return t.Residency
	}
	return home
}

// QueueRegion is the region a queue is created in: its residency, or home
// for a queue without one.
func QueueRegion(q platform.QueueSpec, home string) string {
	if q.Residency != "" {
		return q.Residency
	}
	return home
}
