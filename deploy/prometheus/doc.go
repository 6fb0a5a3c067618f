// Package prometheus holds the platform's Prometheus alert rules
// (rules.yaml) and the test that validates them: every rule parses with
// Prometheus's own rule and PromQL parsers, carries a severity label and
// summary, description and runbook annotations, references only metrics
// the code exports or that are listed as pending, and fires on a
// fabricated condition evaluated by the PromQL engine.
package prometheus
