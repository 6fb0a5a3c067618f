// Package schema is the platform's schema registry: JSON Schema versions
// per event type (the subject, e.g. OrderPlaced), a compatibility mode per
// subject, and an opt-in publisher-side validator.
//
// # Guarantee
//
// Versions of a subject are numbered 1..n and immutable. A version is
// registered only if it is compatible, under the subject's mode, with the
// version(s) before it; a refusal names every rule it breaks, e.g.
//
//	backward: field "customerId" became required in v3; data written with v2 may lack it
//
// The registry lives in replicated platform state: the KV bucket
// platform-schemas in the PLATFORM account (R3 on a 3-node fabric), one
// entry per subject holding its mode and every version. A registration
// is a compare-and-set on that entry's revision, so two concurrent
// registrations cannot both become version n: the loser re-reads, is
// checked again against the winner, and becomes n+1 or is refused.
// Reads are served by the stream leader (direct get is off).
//
// # Modes (as Confluent Schema Registry; default backward)
//
//	none                 no check
//	backward             the new schema reads data written with the latest (upgrade consumers first)
//	forward              the latest schema reads data written with the new (upgrade producers first)
//	full                 both, against the latest
//	*_transitive         the same against every earlier version, not only the latest
//
// # What "reads" means for JSON Schema
//
// Confluent's documented JSON Schema semantics: schema R can read data
// written with schema W when every document valid under W is valid under
// R. The registry proves this structurally (conservatively) over object
// schemas: properties, required, type, additionalProperties (true/absent
// = open content model, false = closed, a schema = partially open),
// items, enum/const and numeric/length bounds, recursively through nested
// objects and arrays. Annotations (title, description, default, examples,
// format) do not count; in particular a default does not relax required.
// allOf/anyOf/oneOf/not/$ref/if/patternProperties and similar are not
// analysed: such a part must stay identical between versions (or use mode
// none). A rename is a removal plus an addition.
//
// Rules, with W the writer's and R the reader's schema (backward: W = old,
// R = new; forward: W = new, R = old; full: both):
//
//	rule                  broken when                                             example message
//	required-added        R requires a field W does not                           field "customerId" became required in v3
//	open-model-field      R constrains a field W's open model may carry freely    field "coupon" added to an open content model in v2
//	closed-model-field    R is closed and W may carry a field R does not declare  field "note" removed from a closed content model in v2
//	content-model-closed  R closes a content model W leaves open                  ... closed in v2 but open in v1
//	type-changed          W allows a type R does not (integer -> number widens)   field "total" changed type from number (v1) to string (v2)
//	enum-narrowed         W allows a value R's enum/const does not
//	constraint-changed    R adds or tightens a bound/pattern W does not have
//	not-structural        a combinator/$ref part differs between W and R
//
// The resulting compatibility matrix (✔ compatible, ✘ refused; the test
// TestCompatibilityMatrix checks every cell):
//
//	change                 open model (default)        closed model (additionalProperties: false)
//	                       backward forward full       backward forward full
//	add optional field     ✘        ✔       ✘          ✔        ✘       ✘
//	add required field     ✘        ✔       ✘          ✘        ✘       ✘
//	remove field           ✔        ✘       ✘          ✘        ✔       ✘
//	  (remove required)    ✔        ✘       ✘          ✘        ✘       ✘
//	rename field           ✘        ✘       ✘          ✘        ✘       ✘
//	change type            ✘        ✘       ✘          ✘        ✘       ✘
//
// The guide's case (v2 -> v3 removes a field old consumers still require)
// passes backward and is refused under full (TestGuideRemoveRequiredField).
// The guide's "adding an optional field with a default is safe in both
// directions" holds for Avro and Protobuf; in JSON Schema it needs a
// partially open model: declare additionalProperties as a schema and give
// the new field exactly that schema (TestPartiallyOpenModel), or use mode
// none and rely on readers that ignore unknown fields.
//
// # Producers and consumers
//
// Validation is opt-in: a platform.Publisher with a Validator
// (Registry.NewValidator, bound per topic to an event type, or per event
// by the Event-Type header) validates each payload against the
// subject's latest version (or the version the event names in
// Event-Schema-Version) before sending, refuses a non-conforming event
// (not stored; the error wraps platform.ErrInvalidEvent and
// ErrValidation) and stamps Event-Schema-Version. The validator keeps
// the registry in memory through a KV watch, so validation does no I/O.
// Consumers read the version with VersionOf to choose a decoder.
// Unknown fields never fail decoding: validation uses the registered
// schema on the producer side only, and encoding/json on the consumer
// side ignores fields the target struct does not declare, so a v1 decoder
// reads v2 data (TestValidatingPublisher).
//
// Per topic: Registry.NewTopicValidator(specs...) validates exactly the
// topics that declare validate: true (platform.TopicSpec.ValidateEvents),
// against the event's Event-Type or else the topic's event_type
// (an event naming neither is refused); every other topic publishes
// unchecked, whatever the event's headers (TestValidationIsOptInPerTopic).
//
// Cost: each (event type, version) is compiled once, on first use. A
// schema using only the common keywords (type, properties, required,
// additionalProperties, items, enum of strings/booleans/null, numeric
// bounds, string and array lengths, annotations) also gets a fast path
// (fastpath.go) that checks the payload bytes in one pass without
// decoding or allocating. The fast path only accepts: anything it is not sure
// of, and every refusal, goes to the full validator, so what is refused
// and the message naming the field are the full validator's
// (TestFastPathAgreesWithFullValidator, TestFastPathNeverAcceptsMore).
//
// # Invariants and limits
//
// A subject's versions together must fit one KV entry (the server's max
// payload, 1 MiB by default); one schema is at most 64 KiB. External
// $refs are refused (the server never fetches or reads files). Versions
// are never deleted.
package schema
