// Package redrivetest is the test helper of the redrive layer's callers:
// DeadLetter fills a topic's DLQ as the consumer runtime would.
package redrivetest
