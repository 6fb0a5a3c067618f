package kvlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
)

// ErrLost: another process took the lease over (a renewal's
// compare-and-set failed).
var ErrLost = errors.New("kvlease: lost to another holder")

// Config sets a lease's timing.
type Config struct {
	// TTL is how long a standby must see the key's revision unchanged
	// before it takes the lease over.
	TTL time.Duration
	// Valid is how long after a successful write's start the holder may
	// act (default TTL/2; must be less than TTL).
	Valid time.Duration
	// Ours, if set, says whether a stored value is this process's own (a
	// write whose answer was lost): such a lease is taken back at once
	// instead of after a TTL.
	Ours func(value []byte) bool
}

// Lease is one process's handle on the lease held at one key.
type Lease struct {
	kv    jetstream.KeyValue
	key   string
	value func() []byte
	cfg   Config

	mu         sync.Mutex
	token      uint64    // revision at acquisition; 0 when not the holder
	rev        uint64    // last revision this holder wrote
	validUntil time.Time // the holder acts only before this
	seenRev    uint64    // standby: last revision observed
	seenAt     time.Time // standby: when seenRev was first observed
}

// New returns a handle on the lease at key of kv; value gives what each
// write stores (the holder's name, say). It holds nothing until Tick.
func New(kv jetstream.KeyValue, key string, value func() []byte, cfg Config) *Lease {
	if cfg.Valid <= 0 || cfg.Valid >= cfg.TTL {
		cfg.Valid = cfg.TTL / 2
	}
	return &Lease{kv: kv, key: key, value: value, cfg: cfg}
}

// Token is the fencing token while this process holds a valid lease,
// else 0.
func (l *Lease) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.token != 0 && time.Now().Before(l.validUntil) {
		return l.token
	}
	return 0
}

// Tick renews the lease if held, or tries to acquire it, and returns the
// token (0 when not the holder). Its error is ErrLost (wrapped) when a
// renewal found another holder; any other error is the bucket's (each
// Tick is bounded by TTL/4), with
// the outcome unknown: a holder keeps its token while it is still valid,
// a standby holds nothing.
func (l *Lease) Tick(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/4)
	defer cancel()
	l.mu.Lock()
	token, rev := l.token, l.rev
	l.mu.Unlock()
	start := time.Now()
	if token != 0 {
		value := l.value()
		nrev, err := l.kv.Update(ctx, l.key, value, rev)
		if jserr.WrongRevision(err) {
			nrev, err = l.renewAfterUnknown(ctx, value, err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case err == nil:
			l.rev, l.validUntil = nrev, start.Add(l.cfg.Valid)
			return l.token, nil
		case jserr.WrongRevision(err):
			l.token, l.rev = 0, 0
			return 0, fmt.Errorf("%w: lease %s: %w", ErrLost, l.key, err)
		case time.Now().Before(l.validUntil):
			return l.token, fmt.Errorf("kvlease: lease %s not renewed yet: %w", l.key, err)
		default:
			return 0, fmt.Errorf("kvlease: lease %s not renewed: %w", l.key, err)
		}
	}
	entry, err := l.kv.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		nrev, err := l.kv.Create(ctx, l.key, l.value())
		return l.acquired(nrev, start, err)
	case err != nil:
		return 0, fmt.Errorf("kvlease: lease %s: %w", l.key, err)
	}
	if l.cfg.Ours == nil || !l.cfg.Ours(entry.Value()) {
		l.mu.Lock()
		if entry.Revision() != l.seenRev {
			l.seenRev, l.seenAt = entry.Revision(), time.Now()
			l.mu.Unlock()
			return 0, nil
		}
		stale := time.Since(l.seenAt) >= l.cfg.TTL
		l.mu.Unlock()
		if !stale {
			return 0, nil
		}
	}
	nrev, err := l.kv.Update(ctx, l.key, l.value(), entry.Revision())
	return l.acquired(nrev, start, err)
}

// renewAfterUnknown retries a renewal whose compare-and-set failed (err)
// when the key's latest write is this holder's own: an earlier renewal
// whose answer was lost (a timeout while a node failed) that did land.
// Nobody wrote after it, so the holder still holds the lease; the retry
// uses the key's revision. Otherwise it returns err: another process
// wrote, and the lease is lost.
func (l *Lease) renewAfterUnknown(ctx context.Context, value []byte, err error) (uint64, error) {
	entry, gerr := l.kv.Get(ctx, l.key)
	if gerr != nil {
		return 0, err
	}
	ours := bytes.Equal(entry.Value(), value)
	if l.cfg.Ours != nil {
		ours = l.cfg.Ours(entry.Value())
	}
	if !ours {
		return 0, err
	}
	return l.kv.Update(ctx, l.key, value, entry.Revision())
}

// Take acquires the lease now, whoever holds it: for a process that a
// fenced write elsewhere has already made the rightful holder (a redrive
// run claimed by a compare-and-set on its record), where waiting a TTL
// for the previous holder would only delay it. The previous holder's
// next renewal fails with ErrLost. A write that lands between Take's
// read and its write is overwritten by reading again, up to 10 times
// (each attempt bounded by TTL/4).
func (l *Lease) Take(ctx context.Context) (uint64, error) {
	for attempt := 1; ; attempt++ {
		tok, err := l.take(ctx)
		if !jserr.WrongRevision(err) {
			return tok, err
		}
		if ctx.Err() != nil || attempt >= 10 {
			return 0, fmt.Errorf("kvlease: take lease %s: %w", l.key, err)
		}
	}
}

func (l *Lease) take(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/4)
	defer cancel()
	start := time.Now()
	var rev uint64
	entry, err := l.kv.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = l.kv.Create(ctx, l.key, l.value())
	case err != nil:
		return 0, fmt.Errorf("kvlease: take lease %s: %w", l.key, err)
	default:
		rev, err = l.kv.Update(ctx, l.key, l.value(), entry.Revision())
	}
	if jserr.WrongRevision(err) {
		return 0, err
	}
	return l.acquired(rev, start, err)
}

// acquired records an acquisition attempt's outcome: a conflict means
// another process was faster.
func (l *Lease) acquired(rev uint64, start time.Time, err error) (uint64, error) {
	switch {
	case jserr.WrongRevision(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("kvlease: acquire lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.rev, l.validUntil = rev, rev, start.Add(l.cfg.Valid)
	l.seenRev, l.seenAt = 0, time.Time{}
	return rev, nil
}

// Drop forgets the lease without releasing it (it was lost, or a store
// fenced this holder).
func (l *Lease) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.rev = 0, 0
}

// Release gives the lease up (deletes the key at the holder's revision),
// so a standby takes over at once; a no-op when not the holder.
func (l *Lease) Release(ctx context.Context) {
	l.mu.Lock()
	token, rev := l.token, l.rev
	l.token, l.rev = 0, 0
	l.mu.Unlock()
	if token == 0 {
		return
	}
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
}
