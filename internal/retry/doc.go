// Package retry is the platform's one way to try an operation again: an
// exponential backoff with full jitter (each wait uniform in (0, bound],
// the bound doubling from Policy.Initial to Policy.Max), bounded by
// tries, by elapsed time and by the caller's context, over
// github.com/cenkalti/backoff/v5; and Sleep, the one wait that ends with
// its context.
//
// Guarantees: op runs at least once (unless ctx has already ended); it
// never runs after ctx ends, after an error Policy.Retryable refuses, or
// past MaxTries or MaxElapsed; Do returns op's last error, wrapped with
// the context's error when the context ended while waiting. Full jitter
// spreads the retries of many clients that failed together (a leader
// election seen by every member at once) instead of synchronising them.
package retry
