// Package schema is the platform's schema registry: JSON Schema versions
// per event type (the subject, e.g. OrderPlaced), a compatibility mode per
// subject (none, backward, forward, full and their _transitive forms, as
// Confluent Schema Registry; default backward), and an opt-in
// publisher-side validator.
//
// The failure it exists for: a producer ships a schema change that old
// consumers cannot read, and finds out from the DLQ.
//
// Guarantees:
//   - Versions of a subject are numbered 1..n and immutable. A version is
//     registered only if it is compatible, under the subject's mode, with
//     the version(s) before it; a refusal names every rule it breaks
//     (`backward: field "customerId" became required in v3; data written
//     with v2 may lack it`). Compatibility is proved structurally and
//     conservatively; a part it does not analyse ($ref, allOf, ...) must
//     stay identical between versions.
//   - Two concurrent registrations cannot both become version n: each is a
//     compare-and-set on the subject's entry in the replicated KV bucket
//     platform-schemas; the loser is checked again against the winner.
//   - A Publisher with a Validator refuses a non-conforming event before
//     it is sent (ErrValidation, wrapping platform.ErrInvalidEvent) and
//     stamps Event-Schema-Version; per topic, only topics that declare
//     validate: true are checked. Validation does no I/O (the registry is
//     kept in memory through a KV watch), and the fast path never accepts
//     what the full validator refuses.
//   - Consumers never fail on unknown fields: a v1 decoder reads v2 data.
//
// Invariants and limits: a subject's versions together fit one KV entry
// (1 MiB by default), one schema at most 64 KiB; external $refs are
// refused; versions are never deleted.
//
// The rules, the compatibility matrix and the validator's design:
// docs/design/schema.md.
package schema
