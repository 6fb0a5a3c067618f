package outboxrelay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
)

// lease is the leader lease of one outbox: a key in a JetStream KV bucket
// whose revision is updated with compare-and-set.
//
//   - Acquire: Create the key (absent or deleted), or Update it with the
//     revision a standby has seen unchanged for a whole TTL (the holder is
//     dead or cut off). The revision the acquisition wrote is the fencing
//     token: stream sequences only grow, so a later holder always has a
//     higher token.
//   - Renew: Update with the holder's last revision every TTL/4. A CAS
//     failure means someone took over: leadership ends at once.
//   - The holder publishes only while its last successful renewal started
//     less than TTL/2 ago. A standby needs a whole TTL of its own clock
//     with no revision change, so the old holder has stopped before a new
//     one starts (no clock comparison between machines, only durations).
//   - Close releases the lease (delete at the holder's revision), so a
//     standby takes over at once after a clean shutdown.
type lease struct {
	kv     jetstream.KeyValue
	key    string
	holder string
	ttl    time.Duration

	mu         sync.Mutex
	token      uint64    // revision at acquisition; 0 when not the holder
	rev        uint64    // last revision this holder wrote
	validUntil time.Time // holder publishes only before this
	seenRev    uint64    // standby: last revision observed
	seenAt     time.Time // standby: when seenRev was first observed
}

func newLease(kv jetstream.KeyValue, key, holder string, ttl time.Duration) *lease {
	return &lease{kv: kv, key: key, holder: holder, ttl: ttl}
}

// current returns the token if this relay holds a valid lease, else 0.
func (l *lease) current() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.token != 0 && time.Now().Before(l.validUntil) {
		return l.token
	}
	return 0
}

// tick renews the lease or tries to acquire it. It returns the token
// (0 when not the holder).
func (l *lease) tick(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	token, rev := l.token, l.rev
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	defer cancel()
	start := time.Now()
	if token != 0 {
		nrev, err := l.kv.Update(ctx, l.key, []byte(l.holder), rev)
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case err == nil:
			l.rev, l.validUntil = nrev, start.Add(l.ttl/2)
			return l.token, nil
		case jserr.WrongRevision(err):
			l.token, l.rev = 0, 0
			return 0, fmt.Errorf("outboxrelay: lease %s lost to another relay: %w", l.key, err)
		default:
			// Unknown outcome (broker unreachable): keep trying; the
			// lease stays valid until validUntil passes.
			if time.Now().After(l.validUntil) {
				return 0, fmt.Errorf("outboxrelay: lease %s not renewed: %w", l.key, err)
			}
			return l.token, nil
		}
	}
	entry, err := l.kv.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		nrev, err := l.kv.Create(ctx, l.key, []byte(l.holder))
		if err != nil {
			return 0, nil // someone else was faster, or the broker is down
		}
		return l.acquired(nrev, start), nil
	case err != nil:
		return 0, nil
	}
	l.mu.Lock()
	if entry.Revision() != l.seenRev {
		l.seenRev, l.seenAt = entry.Revision(), time.Now()
		l.mu.Unlock()
		return 0, nil
	}
	stale := time.Since(l.seenAt) >= l.ttl
	l.mu.Unlock()
	if !stale {
		return 0, nil
	}
	nrev, err := l.kv.Update(ctx, l.key, []byte(l.holder), entry.Revision())
	if err != nil {
		return 0, nil
	}
	return l.acquired(nrev, start), nil
}

func (l *lease) acquired(rev uint64, start time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.rev, l.validUntil = rev, rev, start.Add(l.ttl/2)
	return rev
}

// drop forgets the lease without releasing it (lost, or fenced by the
// store).
func (l *lease) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.rev = 0, 0
}

// release deletes the key at this holder's revision so a standby can take
// over at once.
func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	token, rev := l.token, l.rev
	l.token, l.rev = 0, 0
	l.mu.Unlock()
	if token == 0 {
		return
	}
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
