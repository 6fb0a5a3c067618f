package jsscan

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// numPendingHeader carries, on a batched direct get's end-of-batch
// status, how many matching messages remain after the ones sent.
const numPendingHeader = "Nats-Num-Pending"

// APIPrefix is the JetStream API subject prefix js uses (its domain's, or
// its API prefix, or $JS.API.).
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// DirectBatch sends one batched direct-get request ($JS.API.DIRECT.GET.
// <stream>, body marshalled as JSON: next_by_subj, multi_last, seq,
// start_time, up_to_seq, batch...) and returns the messages it brings and
// the Nats-Num-Pending of its end-of-batch status: how many more match
// (0 when the status does not say). Nothing matching (404) is no
// messages and no error. It is served by any replica caught up with the
// leader (the stream must allow direct gets), so the answer is as of
// that replica and stays readable while the stream has no leader.
func DirectBatch(ctx context.Context, js jetstream.JetStream, stream string, body any) (msgs []*nats.Msg, pending uint64, err error) {
	req, err := json.Marshal(body)
	if err != nil {
		return nil, 0, err
	}
	nc := js.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(APIPrefix(js)+"DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, 0, err
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, 0, err
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
			msgs = append(msgs, msg)
		case "404":
			return nil, 0, nil
		case "204": // end of batch
			if h := msg.Header.Get(numPendingHeader); h != "" {
				if pending, err = strconv.ParseUint(h, 10, 64); err != nil {
					return nil, 0, fmt.Errorf("jsscan: direct get %s: bad %s header %q", stream, numPendingHeader, h)
				}
			}
			return msgs, pending, nil
		case "503":
			return nil, 0, nats.ErrNoResponders
		default:
			return nil, 0, fmt.Errorf("jsscan: direct get %s: status %s %s", stream, status, msg.Header.Get("Description"))
		}
	}
}

// Sequence is a direct-get message's stream sequence.
func Sequence(msg *nats.Msg) (uint64, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jsscan: direct get: bad %s header %q", jetstream.SequenceHeader, msg.Header.Get(jetstream.SequenceHeader))
	}
	return seq, nil
}
