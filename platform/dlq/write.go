package dlq

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

// Failure is what the consumer runtime or the Router knows about one
// event that failed for good: the entry Write stores.
type Failure struct {
	Object    string // topic or queue name
	Stream    string
	Seq       uint64
	Subject   string
	Consumer  string
	Group     string // group or queue name
	Payload   []byte
	Headers   nats.Header
	Reason    string
	Class     ErrorClass
	Attempts  uint64
	Published time.Time // broker append time of the original
	// First and Last are the first and last failure (First zero: Last).
	First, Last time.Time
}

// Write stores the entry of f once, on platform.DLQSubject(f.Stream,
// f.Consumer, f.Seq). It returns nil if the entry is stored now or was
// stored before (by this runtime, another member or the Router).
func Write(ctx context.Context, js jetstream.JetStream, f Failure) error {
	h := nats.Header{}
	for k, v := range f.Headers {
		if strings.HasPrefix(k, "Nats-") || strings.HasPrefix(k, "Platform-Dlq-") {
			continue // broker bookkeeping (Nats-Msg-Id would dedupe the entry away)
		}
		h[k] = append([]string(nil), v...)
	}
	if id := f.Headers.Get(nats.MsgIdHdr); id != "" {
		h.Set("Platform-Event-Id", id)
	}
	if f.First.IsZero() {
		f.First = f.Last
	}
	h.Set(HeaderReason, f.Reason)
	h.Set(HeaderClass, string(f.Class))
	h.Set(HeaderAttempts, strconv.FormatUint(f.Attempts, 10))
	h.Set(HeaderStream, f.Stream)
	h.Set(HeaderSeq, strconv.FormatUint(f.Seq, 10))
	h.Set(HeaderSubject, f.Subject)
	h.Set(HeaderConsumer, f.Consumer)
	h.Set(HeaderGroup, f.Group)
	if t := f.Headers.Get(platform.HeaderTenant); t != "" {
		h.Set(HeaderTenant, t)
	}
	h.Set(HeaderFirstFailure, f.First.UTC().Format(time.RFC3339Nano))
	h.Set(HeaderLastFailure, f.Last.UTC().Format(time.RFC3339Nano))
	if !f.Published.IsZero() {
		h.Set(HeaderPublished, f.Published.UTC().Format(time.RFC3339Nano))
	}
	subj := platform.DLQSubject(f.Stream, f.Consumer, f.Seq)
	msg := &nats.Msg{Subject: subj, Header: h, Data: f.Payload}
	_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID(f.Stream, f.Consumer, f.Seq)))
	if err == nil {
		return nil
	}
	// Refused because an entry already holds the subject: dead-lettered
	// before (DiscardNewPerSubject). Anything else is a real failure.
	if exists, gerr := entryExists(ctx, js, f.Object, subj); gerr == nil && exists {
		return nil
	}
	return fmt.Errorf("platform: dead-letter %s seq %d to %s: %w", f.Stream, f.Seq, platform.DLQStream(f.Object), err)
}

// entryExists reports whether the DLQ of object has an entry on subj.
func entryExists(ctx context.Context, js jetstream.JetStream, object, subj string) (bool, error) {
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

func msgID(stream, consumer string, seq uint64) string {
	return "dlq:" + stream + ":" + consumer + ":" + strconv.FormatUint(seq, 10)
}
