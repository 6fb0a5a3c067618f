// Package outbox measures the outbox relay against raw JetStream publish
// in the same run, on the same connection, topic and keys: how fast a
// relay drains a committed backlog from each store (PostgreSQL and
// Pebble), and the commit-to-ack latency at a steady commit rate.
package outbox
