package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// WorkerSessionsBucket is the replicated KV bucket where the Workers of
// every queue keep their sessions: key <queue stream>.<workers id>, value
// the ack subjects of the jobs they hold, written every SessionHeartbeat
// and whenever they claim a job.
//
// Why: NATS has no notion of a pull consumer's connection owning its
// deliveries, so a job whose worker lost its connection stays with that
// worker until the lease (the consumer's AckWait, default 60 s) lapses.
// Shortening the lease itself would give a job away whenever a live
// worker stalls for a moment (GC, a busy CPU), so the lease is left as
// declared and the workers supervise each other instead: a session whose
// record was not renewed for SessionTTL (measured on the broker's clock:
// against the newest record of the queue, so no clock skew) belongs to a
// worker that crashed or lost its connection. The first live peer to
// delete the record (compare-and-set on its revision, so exactly one)
// sends -NAK to each job's ack subject: the broker redelivers the jobs at
// once, to a live worker, about SessionTTL after the loss instead of a
// whole lease. A worker that comes back after that (a partition, not a
// crash) may still finish and ack its job; the ack applies to the stream
// sequence, so the job is done once or redone (at-least-once, as with a
// lapsed lease). With no live peer, or once a session has been silent
// for half a lease (the job may then be with another worker, and a NAK
// names a stream sequence, not a delivery), the lease is the fallback;
// so the early return needs SessionTTL well below half the lease.
const WorkerSessionsBucket = "platform_worker_sessions"

// Session defaults.
const (
	DefaultSessionHeartbeat = time.Second
	DefaultSessionTTL       = 5 * time.Second
)

// session is what a Workers instance records about itself.
type session struct {
	Jobs []string `json:"jobs"` // ack (reply) subjects of held jobs
	// TTL is the instance's SessionTTL (queue describe calls a session
	// silent for longer lost).
	TTL time.Duration `json:"ttl,omitempty"`
}

// sessions keeps this instance's session record and reclaims the jobs of
// dead peers.
type sessions struct {
	w      *Workers
	kv     jetstream.KeyValue
	prefix string // <stream>.
	key    string
	wake   chan struct{}
	// replicas of the queue's stream (and of the runtime's buckets).
	replicas int

	mu   sync.Mutex
	held map[string]struct{}

	stop context.CancelFunc
	done chan struct{}
}

func (w *Workers) startSessions(ctx context.Context) error {
	replicas := 1
	if st, err := w.js.Stream(ctx, StreamName(w.cfg.Queue)); err == nil {
		replicas = st.CachedInfo().Config.Replicas
	}
	kv, err := w.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: WorkerSessionsBucket, Description: "platform work-queue worker sessions", History: 1,
		Replicas: min(max(replicas, 1), 3), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("platform: workers of %s: sessions bucket: %w", w.cfg.Queue, err)
	}
	if w.cfg.ID == "" {
		w.cfg.ID = nuid.Next()
	}
	prefix := StreamName(w.cfg.Queue) + "."
	s := &sessions{w: w, kv: kv, prefix: prefix, key: prefix + w.cfg.ID, wake: make(chan struct{}, 1), replicas: replicas,
		held: map[string]struct{}{}, done: make(chan struct{})}
	if err := s.put(ctx); err != nil {
		return err
	}
	var sctx context.Context
	sctx, s.stop = context.WithCancel(context.Background())
	w.sess = s
	go s.loop(sctx)
	return nil
}

// hold records a claimed job; release forgets it.
func (s *sessions) hold(reply string) {
	if s == nil || reply == "" {
		return
	}
	s.mu.Lock()
	s.held[reply] = struct{}{}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sessions) release(reply string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.held, reply)
	s.mu.Unlock()
}

func (s *sessions) put(ctx context.Context) error {
	s.mu.Lock()
	rec := session{Jobs: make([]string, 0, len(s.held)), TTL: s.w.cfg.SessionTTL}
	for r := range s.held {
		rec.Jobs = append(rec.Jobs, r)
	}
	s.mu.Unlock()
	slices.Sort(rec.Jobs)
	b, _ := json.Marshal(rec)
	if _, err := s.kv.Put(ctx, s.key, b); err != nil {
		return fmt.Errorf("platform: workers of %s: write session: %w", s.w.cfg.Queue, err)
	}
	return nil
}

func (s *sessions) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.w.cfg.SessionHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		if s.w.crashed.Load() {
			return
		}
		actx, cancel := context.WithTimeout(ctx, s.w.cfg.SessionHeartbeat*3)
		if err := s.put(actx); err != nil {
			s.w.log.Debug("platform: worker session", "err", err)
		} else {
			s.reclaim(actx)
		}
		cancel()
	}
}

// reclaim gives back the jobs of every session of the queue that was not
// renewed for SessionTTL.
func (s *sessions) reclaim(ctx context.Context) {
	entries, newest, err := sessionRecords(ctx, s.kv, s.prefix)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Key() == s.key || newest.Sub(e.Created()) <= s.w.cfg.SessionTTL {
			continue
		}
		// Claim the dead session: exactly one peer wins the delete.
		if err := s.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision())); err != nil {
			continue
		}
		var rec session
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			continue
		}
		// A NAK is applied to the stream sequence whichever delivery it
		// names: once the dead worker's lease may have lapsed (it renewed
		// at least every third of a lease until it fell silent), the job
		// may already be with a live worker, and a NAK would take it away.
		// Leave those to the lease.
		if silent := newest.Sub(e.Created()); silent >= s.w.lease/2 {
			s.w.log.Info("platform: worker session lost too long ago to give its jobs back; the lease does", "session", e.Key(), "silent_for", silent)
			continue
		}
		nc := s.w.js.Conn()
		for _, reply := range rec.Jobs {
			if err := nc.Publish(reply, []byte("-NAK")); err != nil && !errors.Is(err, context.Canceled) {
				s.w.log.Warn("platform: give back job of a lost worker", "session", e.Key(), "err", err)
			}
		}
		if len(rec.Jobs) > 0 {
			s.w.log.Warn("platform: worker session lost; its jobs given back", "session", e.Key(), "jobs", len(rec.Jobs),
				"silent_for", newest.Sub(e.Created()).Round(time.Millisecond))
			s.w.cfg.Metrics.jobsReclaimed(s.w.cfg.Queue, len(rec.Jobs))
		}
	}
}

// sessionRecords reads the session records under prefix (<stream>.) and
// the time of the newest.
func sessionRecords(ctx context.Context, kv jetstream.KeyValue, prefix string) ([]jetstream.KeyValueEntry, time.Time, error) {
	lister, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return nil, time.Time{}, err
	}
	var entries []jetstream.KeyValueEntry
	var newest time.Time
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		entries = append(entries, e)
		if e.Created().After(newest) {
			newest = e.Created()
		}
	}
	return entries, newest, nil
}

// WorkerSession is a Workers instance of a queue as its session record
// shows it (queue describe).
type WorkerSession struct {
	ID string `json:"id"`
	// Jobs is how many jobs it held at its last renewal.
	Jobs int `json:"jobs"`
	// Silent is how long ago it last renewed its session.
	Silent time.Duration `json:"silent"`
	// Lost: silent for longer than its SessionTTL (crashed, or cut off
	// from the cluster); a live peer gives its jobs back and removes the
	// record, or, with none, the lease gives the jobs back.
	Lost bool `json:"lost"`
}

// queueWorkers reads the sessions of queue's Workers instances, by ID.
func queueWorkers(ctx context.Context, js jetstream.JetStream, queue string, now time.Time) ([]WorkerSession, error) {
	kv, err := js.KeyValue(ctx, WorkerSessionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	prefix := StreamName(queue) + "."
	entries, _, err := sessionRecords(ctx, kv, prefix)
	if err != nil {
		return nil, err
	}
	var out []WorkerSession
	for _, e := range entries {
		var rec session
		_ = json.Unmarshal(e.Value(), &rec)
		silent, ttl := max(now.Sub(e.Created()), 0), rec.TTL
		if ttl <= 0 {
			ttl = DefaultSessionTTL
		}
		out = append(out, WorkerSession{ID: strings.TrimPrefix(e.Key(), prefix), Jobs: len(rec.Jobs), Silent: silent, Lost: silent > ttl})
	}
	slices.SortFunc(out, func(a, b WorkerSession) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// close stops the session; graceful removes the record (its jobs were
// given back by Close), otherwise it is left for peers to reclaim.
func (s *sessions) close(ctx context.Context, graceful bool) {
	if s == nil {
		return
	}
	s.stop()
	<-s.done
	if graceful {
		_ = s.kv.Delete(ctx, s.key)
	}
}

// jobsReclaimed is a no-op on a nil *ConsumerMetrics.
func (c *ConsumerMetrics) jobHeld(queue string) {
	if c != nil {
		c.heldC.WithLabelValues(queue).Inc()
	}
}

func (c *ConsumerMetrics) jobsReclaimed(queue string, n int) {
	if c != nil {
		c.reclaimedC.WithLabelValues(queue).Add(float64(n))
	}
}
