// Package prometheus holds the platform's Prometheus alert rules
// (rules.yaml) and the test that validates them: every rule parses with
// Prometheus's own rule and PromQL parsers, carries a severity label and
// summary, description and runbook annotations, references only metrics
// the code exports or that are listed as pending, and fires on a
// fabricated condition evaluated by the PromQL engine. The canary tests
// run a live platformd and evaluate PlatformCanaryMissing on its scraped
// canary ages: it fires for a stalled group (its own or a tenant's) and
// for no other, and clears when the group catches up.
//
// This directory is its own module (the platform replaced by this
// checkout) so that the Prometheus server module and the cloud SDKs it
// requires stay out of the platform module's requirements: a service
// importing the client packages never downloads them.
package prometheus
