// Package embeddednats starts, joins, drains and stops embedded nats-server
// nodes: one Node per host in production, or a Fabric of N nodes of one
// cluster in one process for development and tests.
//
// Guarantee: with the defaults (replicas 3, SyncAlways on) a publish that
// JetStream acknowledged has been written and fsynced on a quorum (2 of 3)
// of the replicas before the ack is sent. Losing any one node, or power to
// every node at once, loses no acknowledged event. With SyncAlways off the
// ack means "in the page cache of a quorum": a single node loss is still
// safe, but a simultaneous power loss of a quorum may lose up to the last
// SyncInterval (default 2 minutes) of acknowledged writes, as Jepsen showed
// for NATS 2.12.1. See Durability.
//
// Every node belongs to a Region: a cluster name plus its own JetStream
// domain. Regions are independent clusters (each with its own meta group),
// linked later by leafnodes, so nothing here assumes a single region.
//
// Nodes always run in operator mode: a trusted operator, a system account,
// a platform admin account, and a full (directory) account resolver that
// persists account JWTs under the node's store directory. The trust
// material (see Trust) is generated once per installation and shared by
// every node of every region.
//
// Routes authenticate: a clustered node accepts a route only with the
// route credentials derived from the trust material (Trust.
// RouteCredentials) and, with cluster.tls.verify, a certificate of the CA,
// so a process that dials the cluster port without them is refused before
// it sees interest or messages. Leafnode links authenticate with link
// users of the platform account. Client, route and leafnode ports take
// TLS (Config.TLS, ClusterListen.TLS, Leaf.TLS); the platform's own
// connections dial with Trust.ClientTLS through Connect.
//
// Readiness means clients can connect and JetStream has a meta leader.
// Close drains the node (lame-duck mode: leaders are transferred and
// clients are moved away) within the caller's deadline, then shuts it down.
package embeddednats
