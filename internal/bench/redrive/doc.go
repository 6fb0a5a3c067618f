// Package redrive measures redriving DLQ entries against raw JetStream
// publish of as many events, on the same temporary fabric in the same
// run, alternating: throughput and CPU per event at an unlimited rate,
// and the rate a redrive holds when given one. It imports the redrive
// package it measures under the same name.
package redrive
