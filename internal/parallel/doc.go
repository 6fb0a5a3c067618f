// Package parallel is the platform's one bounded fan-out: a list of
// independent operations (one per partition, per consumer, per object)
// run with at most n in flight.
//
// Guarantees: Run starts every operation exactly once, whatever the
// others return, and returns only when all have returned; at most n run
// at any moment; the error returned is the first one an operation
// returned (nil if none did). It does not cancel the others on an error:
// each operation bounds itself by the ctx it is given.
//
// Wait and Done are the one way to wait for a sync.WaitGroup of
// background loops within a context or a timer (a Close bounded by its
// ctx): the wait ends when the group does or the bound does, whichever
// is first.
package parallel
