// Package catalogtest declares platform objects for the tests of packages
// built on platform/catalog (consumer groups, the DLQ router): a topic
// and its groups applied by a real Reconciler, on a fabric the helper
// starts or on one the test has.
//
// Guarantee: when a helper returns, the objects exist as the Reconciler
// creates them in production (streams, partition consumers, DLQ
// streams); a refused apply fails the test with t.Fatal. Helpers take
// testing.TB and never panic.
package catalogtest
