// Package conf loads the configuration of platformd: a YAML file, then
// PLATFORM_* environment variables, then command-line flags, each layer
// overriding the one before it, on top of the defaults of every package
// (embeddednats, platform).
//
// Guarantee: Load either returns a Config that passed Validate, or an error
// that names every problem at once, each by its full key as written in the
// YAML file, e.g.
//
//	conf: conf/dev.yaml: invalid configuration (3 problems):
//	  fabric.nodes: expected a number, got "three"
//	  topics.orders.partitions: must be 1..1024, got 0
//	  topics.orders.partitons: unknown key (did you mean partitions?)
//
// The failure it exists for: a bad configuration must stop platformd at
// start, with every problem named, never half-start it. Unknown keys (typos)
// and values of the wrong type are problems, not silently ignored; a value
// that came from the environment or a flag says so.
//
// Invariants:
//   - Precedence: flag > environment > file > defaults.
//   - Environment names are PLATFORM_ + the key path joined with '_' in
//     upper case, '-' and '.' in names becoming '_': data_dir is
//     PLATFORM_DATA_DIR, fabric.nodes is PLATFORM_FABRIC_NODES,
//     node.cluster.routes is PLATFORM_NODE_CLUSTER_ROUTES (a comma-separated
//     list), topics.orders.partitions is PLATFORM_TOPICS_ORDERS_PARTITIONS
//     (only for topics, queues and groups the file declares). PLATFORM_CONFIG
//     names the file. An empty variable counts as unset.
//   - For topics, queues and groups, a key written in the file is taken as
//     written (partitions: 0 is an error, not a default); an omitted key takes
//     the platform default (platform.DefaultTopicSpec, DefaultQueueSpec), the
//     name defaults to the map key, and replicas to the active
//     durability.replicas. For fabric: and node:, zero means "default", as in
//     embeddednats.
//   - Durations are Go durations with a unit (60s, 72h); byte counts
//     (retention.max_bytes, node.max_memory, node.max_store) take a number or
//     a size such as 10GiB or 500MB.
//   - Keys are case-insensitive (viper lower-cases them); topic and queue
//     names may contain dots (orders.eu).
//
// Only this package imports viper.
package conf
