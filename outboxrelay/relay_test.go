package outboxrelay_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/outboxrelay"
)

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := outboxrelay.DefaultConfig("orders-service")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cfg.Name = "bad name"
	cfg.BatchSize = 0
	cfg.AckTimeout = 10 * time.Millisecond
	cfg.LeaseTTL = 0
	cfg.PruneBatch = 1 << 20
	err := cfg.Validate()
	var verr *validate.Error
	if !errors.Is(err, outboxrelay.ErrInvalidConfig) || !errors.As(err, &verr) {
		t.Fatalf("want *validate.Error wrapping ErrInvalidConfig, got %v", err)
	}
	for _, k := range []string{"name", "batch_size", "ack_timeout", "lease_ttl", "prune_batch"} {
		if !verr.Has(k) {
			t.Errorf("no problem reported for %s in:\n%v", k, err)
		}
	}
}

// backlogCase is one relay configuration draining a backlog committed
// before the relay starts.
type backlogCase struct {
	name       string
	prefix     string // of the topic's name
	pebbleOnly bool
	// keys*perKey events, committed in one transaction.
	keys, perKey int
	tune         func(cfg *outboxrelay.Config)
	// check asserts what the case adds to "every event stored once, in
	// per-key order, each acked ok"; reads are the relay's Unsent calls.
	check func(t *testing.T, cfg outboxrelay.Config, c outboxrelay.Counts, n int, reads [][2]int)
}

// TestRelayDrainsBacklog: whatever the read and publish window sizes and
// the publish mode, a relay drains a backlog with every event stored once,
// in per-key order, and acked ok.
func TestRelayDrainsBacklog(t *testing.T) {
	fx := newFixture(t)
	for _, tc := range []backlogCase{{
		// Many more keys than MaxInFlight and reads larger than it: many
		// refills of the publish window.
		name: "MoreKeysThanInFlight", prefix: "window-", pebbleOnly: true, keys: 300, perKey: 3,
		tune: func(cfg *outboxrelay.Config) { cfg.BatchSize, cfg.MaxInFlight = 250, 16 },
	}, {
		// A backlog is read one window (MaxInFlight) first, then never
		// more than the pipeline already holds, so reads grow up to
		// BatchSize and each returns while the records already read are
		// still being published.
		name: "ReadsGrowWithThePipeline", prefix: "ramp-", pebbleOnly: true, keys: 300, perKey: 3,
		tune:  func(cfg *outboxrelay.Config) { cfg.BatchSize, cfg.MaxInFlight = 250, 16 },
		check: checkReadsGrow,
	}, {
		// Many keys ready at once go in fast batches, whose acks count as
		// ok.
		name: "FastBatch", prefix: "batched-", keys: 200, perKey: 10,
		tune: func(cfg *outboxrelay.Config) { cfg.BatchSize, cfg.MaxInFlight = 500, 128 },
		check: func(t *testing.T, _ outboxrelay.Config, c outboxrelay.Counts, n int, _ [][2]int) {
			if c.Duplicate+c.Error+c.Unknown != 0 {
				t.Errorf("counts %+v, want %d ok and nothing else", c, n)
			}
			// The first read (one window) goes singly, the rest mostly batched.
			if c.Batched < uint64(n/2) {
				t.Errorf("only %d of %d events went in fast batches (counts %+v)", c.Batched, n, c)
			}
		},
	}, {
		// With SinglePublishes nothing is batched.
		name: "SinglePublishes", prefix: "single-", pebbleOnly: true, keys: 200, perKey: 3,
		tune: func(cfg *outboxrelay.Config) { cfg.BatchSize, cfg.MaxInFlight, cfg.SinglePublishes = 500, 64, true },
		check: func(t *testing.T, _ outboxrelay.Config, c outboxrelay.Counts, n int, _ [][2]int) {
			if c.Batched+c.BatchRetried != 0 {
				t.Errorf("counts %+v, want %d ok, none batched", c, n)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			bs := []*backend{pebbleBackend(t)}
			if !tc.pebbleOnly {
				bs = backends(t)
			}
			fx.onBackends(t, tc.prefix, bs, func(t *testing.T, b *backend, topic string) {
				evs := b.seed(t, topic, tc.keys, tc.perKey, tc.keys*tc.perKey)
				cfg := testConfig(topic)
				tc.tune(&cfg)
				rec := &readRecorder{Store: b.store}
				r, _ := fx.startRelay(t, cfg, rec)
				fx.deliveredOnce(t, b.store, topic, evs)
				c := r.Counts()
				if c.OK != uint64(len(evs)) {
					t.Errorf("counts %+v, want %d ok", c, len(evs))
				}
				if tc.check != nil {
					rec.mu.Lock()
					reads := slices.Clone(rec.reads)
					rec.mu.Unlock()
					tc.check(t, cfg, c, len(evs), reads)
				}
			})
		})
	}
}

// readRecorder records the limit and skip list length of every Unsent call.
type readRecorder struct {
	outboxrelay.Store
	mu    sync.Mutex
	reads [][2]int // limit, len(skip)
}

func (s *readRecorder) Unsent(ctx context.Context, limit int, skip []uint64) ([]outboxrelay.Record, error) {
	s.mu.Lock()
	s.reads = append(s.reads, [2]int{limit, len(skip)})
	s.mu.Unlock()
	return s.Store.Unsent(ctx, limit, skip)
}

// checkReadsGrow asserts the first read is one window and every later
// one min(BatchSize, max(MaxInFlight, records held)), reaching BatchSize.
func checkReadsGrow(t *testing.T, cfg outboxrelay.Config, _ outboxrelay.Counts, _ int, reads [][2]int) {
	t.Helper()
	if len(reads) == 0 || reads[0] != [2]int{cfg.MaxInFlight, 0} {
		t.Fatalf("first read (limit, skip) = %v, want [%d 0]", reads[:min(1, len(reads))], cfg.MaxInFlight)
	}
	reachedBatch := false
	for i, rd := range reads {
		if want := min(cfg.BatchSize, max(cfg.MaxInFlight, rd[1])); rd[0] != want {
			t.Errorf("read %d: limit %d with %d records held, want %d (reads %v)", i, rd[0], rd[1], want, reads)
		}
		reachedBatch = reachedBatch || rd[0] == cfg.BatchSize
	}
	if !reachedBatch {
		t.Errorf("no read reached BatchSize %d: %v", cfg.BatchSize, reads)
	}
}
