package jspull

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Status codes a pull request's inbox receives instead of a message.
const (
	// Heartbeat: the request still waits at the server.
	Heartbeat = 100
	// NoMessages: a no-wait request found nothing; the request ended.
	NoMessages = 404
	// Expired: the request's expiry passed; the request ended, with
	// PendingMessagesHeader saying how many of its batch were undelivered.
	Expired = 408
	// Ended: the server ended the request (leader change, shutdown,
	// consumer deleted, too many waiting); the description says which.
	Ended = 409
	// PinMismatch: the pin id the request carried is not the priority
	// group's.
	PinMismatch = 423
	// NoResponders: no consumer answered the request.
	NoResponders = 503
)

// PendingMessagesHeader holds, on an Expired status, how many messages of
// the request's batch were not delivered.
const PendingMessagesHeader = "Nats-Pending-Messages"

// Request is a request for messages (nats-server's
// JSApiConsumerGetNextRequest).
type Request struct {
	// Batch is how many messages the request asks for.
	Batch int `json:"batch"`
	// Expires is how long it waits at the server (0: until satisfied).
	Expires time.Duration `json:"expires,omitempty"`
	// Heartbeat asks for a Heartbeat status this often while it waits.
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
}

// Body is the request's JSON body.
func (r Request) Body() []byte {
	b, _ := json.Marshal(r) // ints only: cannot fail
	return b
}

// NextSubject is the subject a pull request for stream's consumer is
// published to; apiPrefix is the JetStream API prefix with its trailing
// dot ("$JS.API.").
func NextSubject(apiPrefix, stream, consumer string) string {
	return apiPrefix + "CONSUMER.MSG.NEXT." + stream + "." + consumer
}

// StatusOf is the status code of a raw header block ("NATS/1.0 408
// Request Timeout": 408), 0 for none.
func StatusOf(hdr []byte) int {
	line, _, _ := bytes.Cut(hdr, []byte("\r\n"))
	rest, ok := bytes.CutPrefix(line, []byte("NATS/1.0 "))
	if !ok || len(rest) < 3 {
		return 0
	}
	n, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0
	}
	return n
}

// ParseAckReply reads the stream and delivery sequences and the pending
// count from a delivery's reply subject after "$JS.ACK." (v1: 7 tokens,
// stream.consumer.delivered.sseq.dseq.ts.pending; v2: 9 or more, with
// the domain and account hash before them).
func ParseAckReply(r []byte) (sseq, dseq, pending uint64, ok bool) {
	var tok [12][]byte
	n := 0
	for len(r) > 0 && n < len(tok) {
		i := bytes.IndexByte(r, '.')
		if i < 0 {
			tok[n], r = r, nil
		} else {
			tok[n], r = r[:i], r[i+1:]
		}
		n++
	}
	off := 0
	switch {
	case n == 7:
	case n >= 9:
		off = 2
	default:
		return 0, 0, 0, false
	}
	num := func(b []byte) (uint64, bool) {
		v, err := strconv.ParseUint(string(b), 10, 64)
		return v, err == nil
	}
	var ok1, ok2, ok3 bool
	sseq, ok1 = num(tok[3+off])
	dseq, ok2 = num(tok[4+off])
	pending, ok3 = num(tok[6+off])
	return sseq, dseq, pending, ok1 && ok2 && ok3
}
