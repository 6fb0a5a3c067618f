// Package daemon is platformd: it runs one embedded node (production, one
// per host) or a dev fabric of N nodes in one process, writes the admin
// credentials, reconciles the declared topics, queues and groups, serves
// the control API over NATS and /healthz, /readyz and /metrics over HTTP.
//
// Invariants: a bad configuration fails before anything listens; nothing
// listens beyond what the configuration names (the NATS client and route
// ports of its nodes, and the HTTP address, which may be turned off);
// credentials are written 0600 in a 0700 directory; /readyz answers 200
// only when every local node accepts clients, JetStream has a meta leader,
// the declared catalog has been reconciled and the control API is up.
package daemon
