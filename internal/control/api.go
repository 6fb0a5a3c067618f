package control

import (
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Endpoint subjects, relative to SubjectPrefix.
const (
	SubjStatus        = "status"
	SubjTopicApply    = "topic.apply"
	SubjTopicList     = "topic.list"
	SubjTopicDescribe = "topic.describe"
	SubjQueueApply    = "queue.apply"
	SubjQueueList     = "queue.list"
	SubjQueueDescribe = "queue.describe"
	SubjGroupApply    = "group.apply"
	SubjGroupReset    = "group.reset"
)

// GroupResetRequest moves a group's position on every partition (see
// catalog.Reconciler.ResetGroup); the reply is a catalog.GroupReset.
type GroupResetRequest = catalog.GroupResetRequest

// ApplyTopicRequest creates or updates a topic.
type ApplyTopicRequest struct {
	Spec    platform.TopicSpec   `json:"spec"`
	Options catalog.ApplyOptions `json:"options"`
}

// ApplyQueueRequest creates or updates a queue.
type ApplyQueueRequest struct {
	Spec    platform.QueueSpec   `json:"spec"`
	Options catalog.ApplyOptions `json:"options"`
}

// ApplyGroupRequest creates or updates a consumer group.
type ApplyGroupRequest struct {
	Spec    platform.GroupSpec   `json:"spec"`
	Options catalog.ApplyOptions `json:"options"`
}

// NameRequest names one object.
type NameRequest struct {
	Name string `json:"name"`
}
