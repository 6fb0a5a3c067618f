package catalog

import (
	"context"
	"fmt"

	"github.com/msgplatform/platform/internal/jsscan"
)

// countMatching returns how many messages of stream have a subject
// matching filter, e.g. one partition's "orders.7.*": one batched direct
// get ({"seq":1,"next_by_subj":filter,"batch":1}) answered with the first
// match and an end-of-batch status counting the rest, from the store's
// per-subject index (no scan, no consumer, no Raft proposal).
// (Do not ask for no_hdr: in nats-server 2.15 the pending count is only
// decremented for the sent message when headers are on.)
func (r *Reconciler) countMatching(ctx context.Context, stream, filter string) (uint64, error) {
	msgs, pending, err := jsscan.DirectBatch(ctx, r.js, stream, struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{Seq: 1, NextFor: filter, Batch: 1, MaxBytes: 1})
	if err != nil {
		return 0, fmt.Errorf("platform: count %s in %s: %w", filter, stream, err)
	}
	return uint64(len(msgs)) + pending, nil
}
