package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jsscan"
	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/platform"
)

// Group reset (replay by time): move one group's position on every
// partition of its topic to the first event at or after a time, to the
// start, or to the end, leaving every other group alone.
//
// The group's position on partition N is its durable consumer <group>-pN
// (DeliverAll, filter <topic>.N.*). For a time T the first stream sequence
// of the partition at or after T is one batched direct get
// ($JS.API.DIRECT.GET.<stream> with start_time T and next_by_subj
// <topic>.N.*): the store maps T to a sequence from its index, the
// subject filter steps to the partition's first event from there, and the
// end-of-batch Nats-Num-Pending header counts the partition's events from
// that one on, which are the events the group will process. The consumer
// is then moved with the consumer reset API ($JS.API.CONSUMER.RESET,
// nats-server 2.14+; a DeliverAll consumer accepts any sequence): its
// config, name, pinned-client priority group and metadata stay as they
// are, its ack floor becomes seq-1 and pending deliveries are dropped.
// Running members keep their pulls and get events from the new position;
// an ack of an event delivered before the reset is ignored.
//
// A topic marked review: required (e.g. payments) refuses a reset without
// an approved request: ResetGroup always refuses it (ErrApprovalRequired;
// a dry run still shows the plan), and only ResetGroupApproved moves it,
// called by redrive.Service.ExecuteReset once it has consumed a request
// approved by a person other than the requester (redrive/reset.go).

// ErrApprovalRequired: the topic is marked review: required and the
// change needs a request approved by a second person.
var ErrApprovalRequired = errors.New("platform: approval required")

// GroupResetRequest says which group to move and where.
type GroupResetRequest struct {
	Group string `json:"group"`
	// Topic is the group's topic; "" finds it from the group's consumers
	// (an error if two topics have a group of that name).
	Topic string `json:"topic,omitempty"`
	// Exactly one target: ToTime (first event at or after it), ToStart
	// (the oldest event still stored) or ToEnd (skip everything stored).
	ToTime  *time.Time `json:"to_time,omitempty"`
	ToStart bool       `json:"to_start,omitempty"`
	ToEnd   bool       `json:"to_end,omitempty"`
	// DryRun computes the plan and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// ApprovalID names the approved request for a topic marked review:
	// required.
	ApprovalID string `json:"approval_id,omitempty"`
	// ConsumeRate and ArrivalRate (events/s) feed the drain estimate; 0
	// means measure over RateWindow (0: do not measure).
	ConsumeRate float64       `json:"consume_rate,omitempty"`
	ArrivalRate float64       `json:"arrival_rate,omitempty"`
	RateWindow  time.Duration `json:"rate_window,omitempty"`
}

// Validate reports every problem with the request.
func (q GroupResetRequest) Validate() error {
	var errs []error
	if !platform.ValidGroupName(q.Group) {
		errs = append(errs, fmt.Errorf("group: must be a-z, 0-9 and '-', got %q", q.Group))
	}
	if q.Topic != "" && !platform.ValidObjectName(q.Topic) {
		errs = append(errs, fmt.Errorf("topic: not a topic name: %q", q.Topic))
	}
	n := 0
	for _, set := range []bool{q.ToTime != nil, q.ToStart, q.ToEnd} {
		if set {
			n++
		}
	}
	if n != 1 {
		errs = append(errs, errors.New("target: give exactly one of to_time, to_start, to_end"))
	}
	if q.ToTime != nil && q.ToTime.After(time.Now().Add(time.Minute)) {
		errs = append(errs, fmt.Errorf("to_time: %s is in the future; use to_end to skip everything stored", q.ToTime.Format(time.RFC3339)))
	}
	if q.ConsumeRate < 0 || q.ArrivalRate < 0 || q.RateWindow < 0 {
		errs = append(errs, errors.New("rates and rate_window must be >= 0"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: group reset: %w", platform.ErrInvalidSpec, errors.Join(errs...))
}

func (q GroupResetRequest) target() string {
	switch {
	case q.ToStart:
		return "start"
	case q.ToEnd:
		return "end"
	case q.ToTime != nil:
		return "time " + q.ToTime.UTC().Format(time.RFC3339Nano)
	}
	return ""
}

// GroupReset is the plan (DryRun) or the outcome of a group reset.
type GroupReset struct {
	Group  string `json:"group"`
	Topic  string `json:"topic"`
	Target string `json:"target"`
	DryRun bool   `json:"dry_run"`
	// ReviewRequired: the topic is marked review: required (a dry run
	// shows the plan; applying needs an approved request).
	ReviewRequired bool                 `json:"review_required,omitempty"`
	Partitions     []GroupResetPosition `json:"partitions"`
	// Pending is what the group had not acknowledged before, ToProcess
	// what it has to process after (both summed over partitions).
	Pending   uint64 `json:"pending"`
	ToProcess uint64 `json:"to_process"`
	// Rates (events/s) and the drain estimate: ToProcess /
	// (ConsumeRate - ArrivalRate). Drains is false when the group does not
	// consume faster than events arrive (or no rate is known).
	ConsumeRate   float64       `json:"consume_rate,omitempty"`
	ArrivalRate   float64       `json:"arrival_rate,omitempty"`
	RatesMeasured bool          `json:"rates_measured,omitempty"`
	DrainTime     time.Duration `json:"drain_time,omitempty"`
	Drains        bool          `json:"drains"`
	Note          string        `json:"note,omitempty"`
}

// GroupResetPosition is one partition's move.
type GroupResetPosition struct {
	Partition int    `json:"partition"`
	Consumer  string `json:"consumer"`
	// CurrentSeq is the next stream sequence the group would process
	// (ack floor + 1), Pending its unacknowledged events.
	CurrentSeq uint64 `json:"current_seq"`
	Pending    uint64 `json:"pending"`
	// NewSeq is where the partition restarts; ToProcess the partition's
	// events from NewSeq on.
	NewSeq    uint64 `json:"new_seq"`
	ToProcess uint64 `json:"to_process"`
}

// DrainTime returns how long a backlog of events takes to drain when the
// group consumes consumeRate events/s while arrivalRate events/s keep
// arriving: backlog / (consumeRate - arrivalRate). ok is false when the
// group does not consume faster than events arrive (it never catches
// up). The guide's case: 36 M events at 50,000/s against 20,000/s
// arriving is 36e6 / 30,000 = 1,200 s = 20 min.
func DrainTime(backlog uint64, consumeRate, arrivalRate float64) (d time.Duration, ok bool) {
	if backlog == 0 {
		return 0, true
	}
	net := consumeRate - arrivalRate
	if net <= 0 || math.IsNaN(net) {
		return 0, false
	}
	secs := float64(backlog) / net
	if secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// ResetGroup moves (or with DryRun, plans moving) the group's position on
// every partition of its topic. Errors: platform.ErrInvalidSpec for a bad
// request, platform.ErrNotFound for a missing group, topic or partition
// consumer, ErrApprovalRequired for a topic marked review: required.
func (r *Reconciler) ResetGroup(ctx context.Context, req GroupResetRequest) (GroupReset, error) {
	return r.resetGroup(ctx, req, false)
}

// ResetGroupApproved is ResetGroup for a request whose approval the caller
// has verified and consumed (req.ApprovalID names it): it also moves a
// group on a topic marked review: required. Only the approval workflow
// (redrive.Service.ExecuteReset) may call it.
func (r *Reconciler) ResetGroupApproved(ctx context.Context, req GroupResetRequest) (GroupReset, error) {
	if req.ApprovalID == "" {
		return GroupReset{}, fmt.Errorf("%w: group reset: an approved reset needs its approval id", platform.ErrInvalidSpec)
	}
	return r.resetGroup(ctx, req, true)
}

func (r *Reconciler) resetGroup(ctx context.Context, req GroupResetRequest, approved bool) (GroupReset, error) {
	if err := req.Validate(); err != nil {
		return GroupReset{}, err
	}
	topic := req.Topic
	if topic == "" {
		var err error
		if topic, err = r.findGroupTopic(ctx, req.Group); err != nil {
			return GroupReset{}, err
		}
	}
	stream, si, spec, err := platformSpec(ctx, r, topic, platform.StreamKindTopic, platform.TopicFromStream)
	if err != nil {
		return GroupReset{}, err
	}
	out := GroupReset{Group: req.Group, Topic: topic, Target: req.target(), DryRun: req.DryRun,
		ReviewRequired: spec.Review == platform.ReviewRequired}
	if out.ReviewRequired && !req.DryRun && !approved {
		return out, fmt.Errorf("%w: topic %q is marked review: required; resetting group %q on it needs a request approved by another person: platformctl group reset %s ... --request --reason WHY, then --approve ID (someone else), then --execute ID; nothing was changed", ErrApprovalRequired, topic, req.Group, req.Group)
	}

	cons, pending, err := r.groupConsumers(ctx, si.Config.Name, req.Group, spec.Partitions)
	if err != nil {
		return out, err
	}
	// Rates are measured before the move (the backlog it creates would
	// not change the consume rate, but the sample must see the group as
	// it runs now).
	out.ConsumeRate, out.ArrivalRate = req.ConsumeRate, req.ArrivalRate
	if (req.ConsumeRate == 0 || req.ArrivalRate == 0) && req.RateWindow > 0 {
		consume, arrival, err := r.measureRates(ctx, stream, si.Config.Name, req.Group, spec.Partitions, pending, req.RateWindow)
		if err != nil {
			return out, err
		}
		if req.ConsumeRate == 0 {
			out.ConsumeRate = consume
		}
		if req.ArrivalRate == 0 {
			out.ArrivalRate = arrival
		}
		out.RatesMeasured = true
		if consume <= arrival {
			out.Note = "the group did not consume faster than events arrived during the sample (a caught-up group consumes at the arrival rate, not its capacity); pass --consume-rate for a better estimate"
		}
	}

	lastSeq := si.State.LastSeq
	if info, err := stream.Info(ctx); err == nil {
		lastSeq = info.State.LastSeq
	}
	out.Partitions = make([]GroupResetPosition, spec.Partitions)
	ops := make([]func(context.Context) error, spec.Partitions)
	for p := range spec.Partitions {
		ci := cons[p]
		pos := &out.Partitions[p]
		*pos = GroupResetPosition{Partition: p, Consumer: ci.Name, CurrentSeq: ci.AckFloor.Stream + 1, Pending: ci.NumPending + uint64(ci.NumAckPending)}
		ops[p] = func(ctx context.Context) error {
			filter := platform.PartitionSubject(topic, p)
			var (
				seq, n uint64
				found  bool
			)
			if !req.ToEnd {
				err := r.do(ctx, "find position of "+ci.Name, func(ctx context.Context) error {
					var err error
					seq, n, found, err = r.FirstMatching(ctx, si.Config.Name, filter, req.ToTime)
					return err
				})
				if err != nil {
					return err
				}
			}
			if !found {
				seq, n = lastSeq+1, 0
			}
			pos.NewSeq, pos.ToProcess = seq, n
			if req.DryRun {
				return nil
			}
			return r.do(ctx, "reset consumer "+si.Config.Name+"/"+ci.Name, func(ctx context.Context) error {
				_, err := r.js.ResetConsumerToSequence(ctx, si.Config.Name, ci.Name, seq)
				return err
			})
		}
	}
	if err := parallel.Run(ctx, 8, ops); err != nil {
		return out, fmt.Errorf("platform: reset group %q on topic %q: %w (partitions already moved stay moved; run the reset again to finish)", req.Group, topic, err)
	}
	for _, pos := range out.Partitions {
		out.Pending += pos.Pending
		out.ToProcess += pos.ToProcess
	}
	if out.ConsumeRate > 0 || out.ArrivalRate > 0 {
		out.DrainTime, out.Drains = DrainTime(out.ToProcess, out.ConsumeRate, out.ArrivalRate)
	}
	if !req.DryRun {
		r.log.Info("group reset", "group", req.Group, "topic", topic, "target", out.Target, "to_process", out.ToProcess)
	}
	return out, nil
}

// findGroupTopic returns the topic whose stream has the group's partition
// 0 consumer.
func (r *Reconciler) findGroupTopic(ctx context.Context, group string) (string, error) {
	topics, err := r.ListTopics(ctx)
	if err != nil {
		return "", err
	}
	var found []string
	for _, t := range topics {
		err := r.do(ctx, "read group "+group+" on "+t.Spec.Name, func(ctx context.Context) error {
			c, err := r.js.Consumer(ctx, platform.StreamName(t.Spec.Name), platform.PartitionConsumer(group, 0))
			if err != nil {
				return err
			}
			if c.CachedInfo().Config.Metadata[platform.MetaGroup] == group {
				found = append(found, t.Spec.Name)
			}
			return nil
		})
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return "", err
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w: no group %q on any topic", platform.ErrNotFound, group)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%w: group %q exists on topics %v; name one with --topic", platform.ErrInvalidSpec, group, found)
}

// groupConsumers returns the group's consumer per partition and their
// total pending; platform.ErrNotFound if any partition has none.
func (r *Reconciler) groupConsumers(ctx context.Context, stream, group string, partitions int) ([]*jetstream.ConsumerInfo, uint64, error) {
	all, err := r.listConsumers(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*jetstream.ConsumerInfo, partitions)
	var missing []int
	var pending uint64
	for p := range partitions {
		ci := all[platform.PartitionConsumer(group, p)]
		if ci == nil || ci.Config.Metadata[platform.MetaGroup] != group {
			missing = append(missing, p)
			continue
		}
		out[p] = ci
		pending += ci.NumPending + uint64(ci.NumAckPending)
	}
	if len(missing) == partitions {
		return nil, 0, fmt.Errorf("%w: no group %q on stream %q", platform.ErrNotFound, group, stream)
	}
	if len(missing) > 0 {
		return nil, 0, fmt.Errorf("%w: group %q has no consumer on partition(s) %v; apply the group to repair it before resetting", platform.ErrNotFound, group, missing)
	}
	return out, pending, nil
}

// measureRates samples the topic's last sequence and the group's pending
// twice, window apart: arrivals = Δlast_seq, consumed = arrivals -
// Δpending (an acknowledged event leaves pending, an arriving one joins
// it).
func (r *Reconciler) measureRates(ctx context.Context, stream jetstream.Stream, name, group string, partitions int, pending0 uint64, window time.Duration) (consume, arrival float64, err error) {
	info0, err := stream.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(window):
	}
	_, pending1, err := r.groupConsumers(ctx, name, group, partitions)
	if err != nil {
		return 0, 0, err
	}
	info1, err := stream.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	secs := time.Since(start).Seconds()
	arrived := float64(info1.State.LastSeq - info0.State.LastSeq)
	consumed := max(arrived-(float64(pending1)-float64(pending0)), 0)
	return consumed / secs, arrived / secs, nil
}

// FirstMatching finds the first message of stream matching filter at or
// after from (nil: from the start) with one batched direct get, and how
// many matching messages there are from it on (it included). found is
// false when there is none.
func (r *Reconciler) FirstMatching(ctx context.Context, stream, filter string, from *time.Time) (seq, n uint64, found bool, err error) {
	body := struct {
		Seq       uint64     `json:"seq,omitempty"`
		StartTime *time.Time `json:"start_time,omitempty"`
		NextFor   string     `json:"next_by_subj"`
		Batch     int        `json:"batch"`
		MaxBytes  int        `json:"max_bytes"`
	}{NextFor: filter, Batch: 1, MaxBytes: 1}
	if from != nil {
		t := from.UTC()
		body.StartTime = &t
	} else {
		body.Seq = 1
	}
	msgs, pending, err := jsscan.DirectBatch(ctx, r.js, stream, body)
	if err != nil || len(msgs) == 0 {
		return 0, 0, false, err
	}
	if seq, err = jsscan.Sequence(msgs[0]); err != nil {
		return 0, 0, false, fmt.Errorf("platform: first of %s in %s: %w", filter, stream, err)
	}
	return seq, uint64(len(msgs)) + pending, true, nil
}
