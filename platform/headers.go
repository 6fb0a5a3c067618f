package platform

import "strings"

// HeaderPrefix is the platform's header namespace. Every header whose key
// starts with it (in any case) belongs to the platform: the ingest
// removes all of them from what a tenant's client publishes, on every
// publish path (core, JetStream, batch, request), before it stamps
// Platform-Tenant. So a Platform-* header on a tenant's stored event was
// written by the platform itself (the ingest, the canary publisher, the
// DLQ router, redrive), which publishes to stored subjects that no tenant
// user may publish to, and the runtime may act on it (skip a canary,
// route a redriven copy to its group, key the inbox on the original id).
//
// Headers a client sets about its own events live outside the namespace:
// Event-Type (schema.EventTypeHeader), Event-Schema-Version
// (SchemaVersionHeader), Event-Tombstone (TombstoneHeader) and the
// broker's Nats-Msg-Id.
const HeaderPrefix = "Platform-"

// IsPlatformHeader reports whether key is in the platform's namespace.
func IsPlatformHeader(key string) bool {
	return len(key) >= len(HeaderPrefix) && strings.EqualFold(key[:len(HeaderPrefix)], HeaderPrefix)
}

// HeaderRedriveGroup names the group (or queue) that dead-lettered a
// redriven event (redrive sets it from the DLQ entry's group). A redrive
// sends the event back to the topic, where every group of the topic would
// receive it again; the runtime of every other group acknowledges it
// without calling its handler (counted in
// platform_consumer_redrive_skipped_total), so a redrive reaches only the
// group that failed. An event without the header, or naming this group,
// is handled as usual.
const HeaderRedriveGroup = "Platform-Redrive-Group"

// HeaderTenant carries the tenant of an event (stamped by the ingest from
// the authenticated account); a DLQ entry copies it into
// dlq.HeaderTenant.
const HeaderTenant = "Platform-Tenant"
