package tenancy

import (
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Control API subjects (relative to the control prefix platform.v1).
const (
	SubjTenantCreate  = "tenant.create"
	SubjTenantList    = "tenant.list"
	SubjTenantShow    = "tenant.show"
	SubjTenantUpdate  = "tenant.update"
	SubjTenantSuspend = "tenant.suspend"
	SubjTenantResume  = "tenant.resume"
	SubjTenantDelete  = "tenant.delete"
	SubjTenantTopic   = "tenant.topic.apply"
	SubjTenantQueue   = "tenant.queue.apply"
	SubjTenantGroup   = "tenant.group.apply"
	SubjUserAdd       = "user.add"
	SubjUserList      = "user.list"
	SubjUserRevoke    = "user.revoke"
	SubjUserUpdate    = "user.update"
	SubjTenantShare   = "tenant.share"
	SubjTenantShares  = "tenant.shares"
	SubjUsage         = "usage"
	SubjAudit         = "audit"
)

// Requests of the control API. Actor is who asks (platformctl sends the
// operating-system user); every caller holds the platform admin
// credentials, so it is recorded as given.
type (
	CreateRequest struct {
		Actor string `json:"actor"`
		Spec  Spec   `json:"spec"`
	}
	UpdateRequest struct {
		Actor string `json:"actor"`
		Name  string `json:"name"`
		Quota Quota  `json:"quota"`
	}
	NameRequest struct {
		Actor string `json:"actor,omitempty"`
		Name  string `json:"name"`
		Purge bool   `json:"purge,omitempty"`
	}
	// ObjectRequest applies Spec, a topic, queue or group, in Tenant's
	// account.
	ObjectRequest[S platform.TopicSpec | platform.QueueSpec | platform.GroupSpec] struct {
		Actor   string               `json:"actor"`
		Tenant  string               `json:"tenant"`
		Spec    S                    `json:"spec"`
		Options catalog.ApplyOptions `json:"options"`
	}
	TopicRequest = ObjectRequest[platform.TopicSpec]
	QueueRequest = ObjectRequest[platform.QueueSpec]
	GroupRequest = ObjectRequest[platform.GroupSpec]
	UserRequest  struct {
		Actor  string   `json:"actor"`
		Tenant string   `json:"tenant"`
		User   UserSpec `json:"user"`
	}
	RevokeRequest struct {
		Actor  string `json:"actor"`
		Tenant string `json:"tenant"`
		User   string `json:"user"`
	}
)
