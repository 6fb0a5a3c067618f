package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
)

// DefaultSessionHeartbeat is how often Workers renew their session.
const DefaultSessionHeartbeat = time.Second

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
	if st, err := w.js.Stream(ctx, platform.StreamName(w.cfg.Queue)); err == nil {
		replicas = st.CachedInfo().Config.Replicas
	}
	kv, err := w.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: platform.WorkerSessionsBucket, Description: "platform work-queue worker sessions", History: 1,
		Replicas: min(max(replicas, 1), 3), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("platform: workers of %s: sessions bucket: %w", w.cfg.Queue, err)
	}
	if w.cfg.ID == "" {
		w.cfg.ID = nuid.Next()
	}
	prefix := platform.StreamName(w.cfg.Queue) + "."
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
	tick.Signal(s.wake)
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
	rec := platform.SessionRecord{Jobs: make([]string, 0, len(s.held)), TTL: s.w.cfg.SessionTTL}
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
	tick.Repeat(ctx, s.w.cfg.SessionHeartbeat, s.wake, func(bool) bool {
		if s.w.crashed.Load() {
			return false
		}
		actx, cancel := context.WithTimeout(ctx, s.w.cfg.SessionHeartbeat*3)
		defer cancel()
		if err := s.put(actx); err != nil {
			s.w.log.Debug("platform: worker session", "err", err)
		} else {
			s.reclaim(actx)
		}
		return true
	})
}

// reclaim gives back the jobs of every session of the queue that was not
// renewed for SessionTTL.
func (s *sessions) reclaim(ctx context.Context) {
	entries, newest, err := platform.ReadSessionRecords(ctx, s.kv, s.prefix)
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
		var rec platform.SessionRecord
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

// jobsReclaimed is a no-op on a nil *Metrics.
func (c *Metrics) jobHeld(queue string) {
	if c != nil {
		c.heldC.WithLabelValues(queue).Inc()
	}
}

func (c *Metrics) jobsReclaimed(queue string, n int) {
	if c != nil {
		c.reclaimedC.WithLabelValues(queue).Add(float64(n))
	}
}
