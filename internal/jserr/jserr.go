package jserr

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// API error codes of nats-server 2.15 the classification names.
const (
	// CodeWrongLastSequence: a compare-and-set conflict on a single-replica
	// stream (jetstream.JSErrCodeStreamWrongLastSequence).
	CodeWrongLastSequence = jetstream.JSErrCodeStreamWrongLastSequence // 10071
	// CodeWrongLastSequenceReplicated: the same conflict on a replicated
	// stream (jetstream.JSErrCodeStreamWrongLastSequenceConstant).
	CodeWrongLastSequenceReplicated = jetstream.JSErrCodeStreamWrongLastSequenceConstant // 10164
	// CodeNoPeers: no suitable peers for placement. Transient only while a
	// cluster forms; callers bound how long they retry it.
	CodeNoPeers jetstream.ErrorCode = 10005
	// CodeNoAccount: account not found, from a peer that has not loaded a
	// new account yet. Transient only for a while; callers bound it.
	CodeNoAccount jetstream.ErrorCode = 10035
)

// converging are the API codes of a cluster that is electing a leader or
// applying an earlier change: the same request succeeds later.
var converging = map[jetstream.ErrorCode]bool{
	10008: true, // JetStream system temporarily unavailable (no meta leader)
	10009: true, // cluster can not handle request (leader change)
	10023: true, // insufficient resources (consumer peers offline)
	10202: true, // cluster member change is in progress
	10226: true, // stream reconfiguration already in progress
}

// Code returns err's JetStream API error code, if it carries one.
func Code(err error) (jetstream.ErrorCode, bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode, true
	}
	return 0, false
}

// HasCode reports whether err carries a JetStream API error with code.
func HasCode(err error, code jetstream.ErrorCode) bool {
	c, ok := Code(err)
	return ok && c == code
}

// WrongRevision reports whether err is a compare-and-set conflict: the
// key exists, or the revision (last sequence) expected is no longer the
// last. The caller lost a race; it must re-read before it acts again.
func WrongRevision(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	code, ok := Code(err)
	return ok && (code == CodeWrongLastSequence || code == CodeWrongLastSequenceReplicated)
}

// NoResponders reports whether nobody answered a request: the stream or
// its leader is not there (yet), or the request could not be delivered.
func NoResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// Refused reports whether a publish's error says the event was not
// stored: no stream answered, or the stream answered with an API error.
// Any other error (a timeout, a lost connection) leaves the outcome
// unknown: the event may be stored, and only a retry with the same
// Nats-Msg-Id settles it.
func Refused(err error) bool {
	_, api := Code(err)
	return api || NoResponders(err)
}

// Transient reports whether the same request may succeed when tried
// again: no answer or none in time, a connection that is reconnecting,
// or a cluster electing a leader or converging. CodeNoPeers and
// CodeNoAccount are not included: they are transient only for a while,
// which the caller bounds (see Code).
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case NoResponders(err),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected):
		return true
	}
	code, ok := Code(err)
	return ok && converging[code]
}
