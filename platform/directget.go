package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// numPendingHeader carries, on a batched direct get, how many matching
// messages remain after the ones sent.
const numPendingHeader = "Nats-Num-Pending"

// countMatching returns how many messages of stream have a subject
// matching filter, e.g. one partition's "orders.7.*".
//
// It sends one batched direct-get request ($JS.API.DIRECT.GET.<stream>,
// {"seq":1,"next_by_subj":filter,"batch":1}): the server answers with the
// first matching message and an end-of-batch status whose
// Nats-Num-Pending header holds how many matching messages follow it,
// computed from the store's per-subject index (no scan, no consumer, no
// Raft proposal), or with 404 when nothing matches. Direct gets are
// served by any replica that is caught up with the leader (the stream must
// have AllowDirect, as every platform stream does), so the count is as of
// that replica and stays readable while the stream has no leader.
// (Do not ask for no_hdr: in nats-server 2.15 the pending count is only
// decremented for the sent message when headers are on.)
func (r *Reconciler) countMatching(ctx context.Context, stream, filter string) (uint64, error) {
	nc := r.js.Conn()
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{Seq: 1, NextFor: filter, Batch: 1, MaxBytes: 1})
	if err != nil {
		return 0, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(APIPrefix(r.js)+"DIRECT.GET."+stream, inbox, req); err != nil {
		return 0, err
	}
	var n uint64
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return 0, err
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
			n++ // a matching message
		case "404":
			return 0, nil
		case "204": // end of batch
			pending, err := strconv.ParseUint(msg.Header.Get(numPendingHeader), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("platform: direct get %s %s: bad %s header %q", stream, filter, numPendingHeader, msg.Header.Get(numPendingHeader))
			}
			return n + pending, nil
		case "503":
			return 0, nats.ErrNoResponders
		default:
			return 0, fmt.Errorf("platform: direct get %s %s: status %s %s", stream, filter, status, msg.Header.Get("Description"))
		}
	}
}

// APIPrefix is the JetStream API subject prefix js uses.
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
