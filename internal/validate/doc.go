// Package validate collects configuration problems so that Validate methods
// report every problem at once, each named by its key, e.g.
//
//	topics.orders.partitions: must be 1..1024, got 0
//
// Packages build a *Problems, add to it, and return p.Err(). Callers that
// nest configs re-key problems with Prefix, so the key a user sees is the
// full path in the configuration file.
package validate
