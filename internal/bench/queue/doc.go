// Package queue measures work-queue consumption: consumer.Workers (a job
// claimed only when a handler is free, its lease renewed, its outcome
// settled) against a raw nats.go consumer with the same concurrency, on
// the same queue in the same run, interleaved.
package queue
