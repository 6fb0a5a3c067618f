package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// deadLetter is what the runtime and the router know about one failure.
type deadLetter struct {
	object      string // topic or queue name
	stream      string
	seq         uint64
	subject     string
	consumer    string
	group       string
	payload     []byte
	headers     nats.Header
	reason      string
	class       platform.ErrorClass
	attempts    uint64
	published   time.Time // broker append time of the original
	first, last time.Time
}

// writeDLQ stores the entry once. It returns nil if the entry is stored
// now or was stored before (by this runtime, another member or the
// router).
func writeDLQ(ctx context.Context, js jetstream.JetStream, d deadLetter) error {
	h := nats.Header{}
	for k, v := range d.headers {
		if strings.HasPrefix(k, "Nats-") || strings.HasPrefix(k, "Platform-Dlq-") {
			continue // broker bookkeeping (Nats-Msg-Id would dedupe the entry away)
		}
		h[k] = append([]string(nil), v...)
	}
	if id := d.headers.Get(nats.MsgIdHdr); id != "" {
		h.Set("Platform-Event-Id", id)
	}
	if d.first.IsZero() {
		d.first = d.last
	}
	h.Set(platform.HeaderDLQReason, d.reason)
	h.Set(platform.HeaderDLQClass, string(d.class))
	h.Set(platform.HeaderDLQAttempts, strconv.FormatUint(d.attempts, 10))
	h.Set(platform.HeaderDLQStream, d.stream)
	h.Set(platform.HeaderDLQSeq, strconv.FormatUint(d.seq, 10))
	h.Set(platform.HeaderDLQSubject, d.subject)
	h.Set(platform.HeaderDLQConsumer, d.consumer)
	h.Set(platform.HeaderDLQGroup, d.group)
	if t := d.headers.Get(platform.HeaderTenant); t != "" {
		h.Set(platform.HeaderDLQTenant, t)
	}
	h.Set(platform.HeaderDLQFirstFailure, d.first.UTC().Format(time.RFC3339Nano))
	h.Set(platform.HeaderDLQLastFailure, d.last.UTC().Format(time.RFC3339Nano))
	if !d.published.IsZero() {
		h.Set(platform.HeaderDLQPublished, d.published.UTC().Format(time.RFC3339Nano))
	}
	subj := platform.DLQSubject(d.stream, d.consumer, d.seq)
	msg := &nats.Msg{Subject: subj, Header: h, Data: d.payload}
	_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(dlqMsgID(d.stream, d.consumer, d.seq)))
	if err == nil {
		return nil
	}
	// Refused because an entry already holds the subject: dead-lettered
	// before (DiscardNewPerSubject). Anything else is a real failure.
	if exists, gerr := dlqEntryExists(ctx, js, d.object, subj); gerr == nil && exists {
		return nil
	}
	return fmt.Errorf("platform: dead-letter %s seq %d to %s: %w", d.stream, d.seq, platform.DLQStream(d.object), err)
}

// dlqEntryExists reports whether the DLQ of object has an entry on subj.
func dlqEntryExists(ctx context.Context, js jetstream.JetStream, object, subj string) (bool, error) {
	s, err := js.Stream(ctx, platform.DLQStream(object))
	if err != nil {
		return false, err
	}
	_, err = s.GetLastMsgForSubject(ctx, subj)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

func dlqMsgID(stream, consumer string, seq uint64) string {
	return "dlq:" + stream + ":" + consumer + ":" + strconv.FormatUint(seq, 10)
}
