package catalog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/platform"
)

// Streams and consumers are compared on the fields the platform manages
// only: the server fills in defaults and its own _nats.* metadata, and
// fields an operator tuned by hand (e.g. max_msg_size) are left as they
// are. Updates start from the current config and overwrite the managed
// fields, so they never reset anything else.

// diffs accumulates "key: from -> to" lines.
type diffs []string

func (d *diffs) cmp(key string, cur, want any) {
	c, w := show(cur), show(want)
	if c != w {
		*d = append(*d, fmt.Sprintf("%s: %s -> %s", key, c, w))
	}
}

func show(v any) string {
	switch v := v.(type) {
	case string:
		if v == "" {
			return `""`
		}
		return v
	case time.Duration:
		return v.String()
	case []string:
		return "[" + strings.Join(v, " ") + "]"
	case *jetstream.SubjectTransformConfig:
		if v == nil {
			return "none"
		}
		return v.Source + " => " + v.Destination
	case jetstream.PriorityPolicy:
		switch v {
		case jetstream.PriorityPolicyNone:
			return "none"
		case jetstream.PriorityPolicyPinned:
			return "pinned_client"
		case jetstream.PriorityPolicyOverflow:
			return "overflow"
		}
	}
	return fmt.Sprint(v)
}

// metadataLabels maps platform metadata keys to the configuration keys a
// user knows them by.
var metadataLabels = map[string]string{
	platform.MetaPartitions:  "partitions",
	platform.MetaKey:         "key",
	platform.MetaOwner:       "owner",
	platform.MetaResidency:   "residency",
	platform.MetaLease:       "lease",
	platform.MetaMaxAttempts: "max_attempts",
}

func diffMetadata(d *diffs, prefix string, cur, want map[string]string) {
	c, w := platformMetadata(cur), platformMetadata(want)
	keys := slices.Sorted(maps.Keys(c))
	for k := range w {
		if _, ok := c[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		label, ok := metadataLabels[k]
		if !ok {
			label = prefix + "metadata." + k
		}
		d.cmp(label, c[k], w[k])
	}
}

// platformMetadata returns the platform.* subset of md (never nil).
func platformMetadata(md map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		if strings.HasPrefix(k, platform.MetaPrefix) {
			out[k] = v
		}
	}
	return out
}

// mergeMetadata keeps the keys of cur that are not the platform's (e.g. the
// server's _nats.* keys) and sets the platform's from want.
func mergeMetadata(cur, want map[string]string) map[string]string {
	out := make(map[string]string, len(cur)+len(want))
	for k, v := range cur {
		if !strings.HasPrefix(k, platform.MetaPrefix) {
			out[k] = v
		}
	}
	maps.Copy(out, want)
	return out
}

// normLimit maps the server's "unlimited" (-1) and the client's (0) to 0.
func normLimit(v int64) int64 { return max(v, 0) }

// diffStream returns the managed differences between a stream's current
// config and the wanted one, keyed like the configuration where a key
// exists ("replicas", "retention.max_age") and as "stream.<field>"
// otherwise.
func diffStream(cur *jetstream.StreamConfig, want jetstream.StreamConfig) []string {
	var d diffs
	d.cmp("stream.subjects", cur.Subjects, want.Subjects)
	d.cmp("stream.subject_transform", cur.SubjectTransform, want.SubjectTransform)
	d.cmp("stream.retention", cur.Retention, want.Retention)
	d.cmp("stream.storage", cur.Storage, want.Storage)
	d.cmp("replicas", cur.Replicas, want.Replicas)
	d.cmp("retention.max_age", cur.MaxAge, want.MaxAge)
	d.cmp("retention.max_bytes", normLimit(cur.MaxBytes), normLimit(want.MaxBytes))
	d.cmp("stream.discard", cur.Discard, want.Discard)
	d.cmp("stream.allow_direct", cur.AllowDirect, want.AllowDirect)
	d.cmp("stream.duplicate_window", cur.Duplicates, want.Duplicates)
	diffMetadata(&d, "stream.", cur.Metadata, want.Metadata)
	return d
}

// mergeStream is cur with the managed fields of want.
func mergeStream(cur *jetstream.StreamConfig, want jetstream.StreamConfig) jetstream.StreamConfig {
	n := *cur
	n.Subjects = want.Subjects
	n.SubjectTransform = want.SubjectTransform
	n.Replicas = want.Replicas
	n.MaxAge = want.MaxAge
	n.MaxBytes = want.MaxBytes
	if n.MaxBytes == 0 {
		n.MaxBytes = -1
	}
	n.Discard = want.Discard
	n.AllowDirect = want.AllowDirect
	n.Duplicates = want.Duplicates
	n.Metadata = mergeMetadata(cur.Metadata, want.Metadata)
	return n
}

// diffConsumer is diffStream for consumers; keys are prefix+field.
func diffConsumer(prefix string, cur *jetstream.ConsumerConfig, want jetstream.ConsumerConfig) []string {
	var d diffs
	d.cmp(prefix+"filter_subject", cur.FilterSubject, want.FilterSubject)
	d.cmp(prefix+"deliver_policy", cur.DeliverPolicy, want.DeliverPolicy)
	d.cmp(prefix+"ack_policy", cur.AckPolicy, want.AckPolicy)
	d.cmp(prefix+"ack_wait", cur.AckWait, want.AckWait)
	d.cmp(prefix+"max_deliver", normLimit(int64(cur.MaxDeliver)), normLimit(int64(want.MaxDeliver)))
	if want.MaxAckPending != 0 {
		d.cmp(prefix+"max_ack_pending", cur.MaxAckPending, want.MaxAckPending)
	}
	d.cmp(prefix+"priority_policy", cur.PriorityPolicy, want.PriorityPolicy)
	d.cmp(prefix+"priority_groups", cur.PriorityGroups, want.PriorityGroups)
	d.cmp(prefix+"pinned_ttl", cur.PinnedTTL, want.PinnedTTL)
	diffMetadata(&d, prefix, cur.Metadata, want.Metadata)
	return d
}

// immutableConsumer names the differences the server refuses to update in
// place.
func immutableConsumer(cur *jetstream.ConsumerConfig, want jetstream.ConsumerConfig) []string {
	var out []string
	if cur.DeliverSubject != "" {
		out = append(out, "it is a push consumer")
	}
	if cur.DeliverPolicy != want.DeliverPolicy {
		out = append(out, fmt.Sprintf("deliver policy %s (want %s)", cur.DeliverPolicy, want.DeliverPolicy))
	}
	if cur.AckPolicy != want.AckPolicy {
		out = append(out, fmt.Sprintf("ack policy %s (want %s)", cur.AckPolicy, want.AckPolicy))
	}
	return out
}

// mergeConsumer is cur with the managed fields of want.
func mergeConsumer(cur *jetstream.ConsumerConfig, want jetstream.ConsumerConfig) jetstream.ConsumerConfig {
	n := *cur
	n.FilterSubject = want.FilterSubject
	n.AckWait = want.AckWait
	n.MaxDeliver = want.MaxDeliver
	if want.MaxAckPending != 0 {
		n.MaxAckPending = want.MaxAckPending
	}
	n.PriorityPolicy = want.PriorityPolicy
	n.PriorityGroups = want.PriorityGroups
	n.PinnedTTL = want.PinnedTTL
	n.Metadata = mergeMetadata(cur.Metadata, want.Metadata)
	return n
}

// The steps below are idempotent, so a retry after an attempt that timed
// out but succeeded on the server converges instead of failing.

func (r *Reconciler) createStream(cfg jetstream.StreamConfig) func(context.Context) error {
	return func(ctx context.Context) error {
		return r.do(ctx, "create stream "+cfg.Name, func(ctx context.Context) error {
			_, err := r.js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				if s, ierr := r.js.Stream(ctx, cfg.Name); ierr == nil && len(diffStream(&s.CachedInfo().Config, cfg)) == 0 {
					return nil
				}
			}
			if jserr.HasCode(err, jserr.CodeNoPeers) {
				return fmt.Errorf("%w (replicas %d needs %d JetStream servers in the cluster)", err, cfg.Replicas, cfg.Replicas)
			}
			return err
		})
	}
}

func (r *Reconciler) updateStream(cfg jetstream.StreamConfig) func(context.Context) error {
	return func(ctx context.Context) error {
		return r.do(ctx, "update stream "+cfg.Name, func(ctx context.Context) error {
			_, err := r.js.UpdateStream(ctx, cfg)
			return err
		})
	}
}

func (r *Reconciler) createConsumer(stream string, cfg jetstream.ConsumerConfig) func(context.Context) error {
	return func(ctx context.Context) error {
		return r.do(ctx, "create consumer "+stream+"/"+cfg.Durable, func(ctx context.Context) error {
			_, err := r.js.CreateConsumer(ctx, stream, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) || jserr.HasCode(err, jetstream.JSErrCodeConsumerNameExists) {
				if c, ierr := r.js.Consumer(ctx, stream, cfg.Durable); ierr == nil && len(diffConsumer("", &c.CachedInfo().Config, cfg)) == 0 {
					return nil
				}
			}
			return err
		})
	}
}

func (r *Reconciler) updateConsumer(stream string, cfg jetstream.ConsumerConfig) func(context.Context) error {
	return func(ctx context.Context) error {
		return r.do(ctx, "update consumer "+stream+"/"+cfg.Durable, func(ctx context.Context) error {
			_, err := r.js.UpdateConsumer(ctx, stream, cfg)
			return err
		})
	}
}

func (r *Reconciler) deleteConsumer(stream, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return r.do(ctx, "delete consumer "+stream+"/"+name, func(ctx context.Context) error {
			err := r.js.DeleteConsumer(ctx, stream, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil
			}
			return err
		})
	}
}

// checkStreamName refuses a stream name taken by something the platform
// does not manage, or by the other kind of platform object. It reports
// whether the existing stream (if any) is of kind and may be updated.
func (p *plan) checkStreamName(key string, info *jetstream.StreamInfo, kind string) bool {
	if info == nil {
		return true
	}
	switch k := platform.StreamKind(&info.Config); k {
	case kind:
		return true
	case "":
		p.conflict(key, "stream %q already exists and is not managed by the platform (no %s metadata); choose another name, or move its data to a new %s and delete it", info.Config.Name, platform.MetaKind, kind)
	case platform.StreamKindTopic, platform.StreamKindQueue:
		p.conflict(key, "%q is already a %s; a %s cannot become a %s in place (different retention and delivery): declare the %s under another name, or drain and delete the %s first", platform.ObjectName(&info.Config), k, k, kind, kind, k)
	default:
		p.conflict(key, "stream %q records an unknown platform kind %q; inspect it before applying", info.Config.Name, k)
	}
	return false
}

// existingSpec returns the spec fromStream reads back from info, the
// stream already backing key; false, with a conflict planned, when the
// stream is not a platform object of kind or its record is damaged.
func existingSpec[S any](p *plan, key, kind string, info *jetstream.StreamInfo, fromStream func(*jetstream.StreamConfig) (S, error)) (S, bool) {
	var zero S
	if !p.checkStreamName(key, info, kind) {
		return zero, false
	}
	cur, err := fromStream(&info.Config)
	if err != nil {
		p.conflict(key, "%v; the %s's record is damaged, inspect the stream before applying", err, kind)
		return zero, false
	}
	return cur, true
}

// checkStorage plans a conflict when the storage or retention of cur,
// which cannot change in place, differ from want's.
func (p *plan) checkStorage(key, kind string, cur *jetstream.StreamConfig, want jetstream.StreamConfig) {
	if cur.Storage != want.Storage || cur.Retention != want.Retention {
		p.conflict(key, "stream %q has %s storage and %s retention, which cannot be changed in place (want %s, %s); recreate the %s",
			want.Name, cur.Storage, cur.Retention, want.Storage, want.Retention, kind)
	}
}

// checkReplicas refuses lowering replicas below 3 without the flag.
func (p *plan) checkReplicas(key, kind string, cur, want int) {
	if want >= cur || want >= 3 || p.o.AllowReducedReplicas {
		return
	}
	p.conflict(key+".replicas", "lowering %d -> %d reduces durability: with %d replica(s) the loss of one node can lose acknowledged events or stop the %s (3 replicas survive one node loss); if that is intended, apply with --allow-reduced-replicas (allow_reduced_replicas: true)",
		cur, want, want, kind)
}

// checkSubjects refuses creating a stream whose subjects overlap another
// stream's (the server would refuse it half-way through an Apply).
func (p *plan) checkSubjects(ctx context.Context, key string, cfg jetstream.StreamConfig) {
	for _, subj := range cfg.Subjects {
		var names []string
		err := p.r.do(ctx, "list streams on "+subj, func(ctx context.Context) error {
			names = names[:0]
			l := p.r.js.StreamNames(ctx, jetstream.WithStreamListSubject(subj))
			for n := range l.Name() {
				names = append(names, n)
			}
			return l.Err()
		})
		if err != nil {
			p.failRead(err)
			return
		}
		for _, n := range names {
			if n != cfg.Name {
				p.conflict(key+".name", "its subjects %s overlap those of stream %q; choose a name whose subjects no other stream uses", subj, n)
			}
		}
	}
}
