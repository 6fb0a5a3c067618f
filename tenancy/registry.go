package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/platform"
)

// RegistryBucket is the replicated KV bucket (PLATFORM account) holding
// one record per tenant, keyed by name.
const RegistryBucket = "platform-tenants"

// registry reads and writes tenant records with optimistic concurrency:
// every write names the revision it read, so two daemons changing one
// tenant at once cannot lose either change silently.
// The bucket is created with the first tenant, so an installation without
// tenants has no tenancy streams.
type registry struct {
	js       jetstream.JetStream
	replicas int
	mu       sync.Mutex
	kv       jetstream.KeyValue
}

// bind returns the bucket, creating it if create; nil if it does not
// exist and !create.
func (r *registry) bind(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := kvutil.Lookup(ctx, r.js, RegistryBucket)
	if kv == nil && err == nil {
		if !create {
			return nil, nil
		}
		kv, err = kvutil.Open(ctx, r.js, jetstream.KeyValueConfig{
			Bucket:      RegistryBucket,
			Description: "platform tenants (tenancy registry)",
			History:     10,
			Replicas:    r.replicas,
			Storage:     jetstream.FileStorage,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("tenancy: registry bucket: %w", err)
	}
	// Reads must see the last write (a change reads the revision it then
	// writes against): serve them from the stream leader, not from any
	// replica through direct get.
	if kv, err = platform.LeaderReads(ctx, r.js, kv); err != nil {
		return nil, fmt.Errorf("tenancy: registry bucket: %w", err)
	}
	r.kv = kv
	return kv, nil
}

func (r *registry) get(ctx context.Context, name string) (*Tenant, error) {
	kv, err := r.bind(ctx, false)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, fmt.Errorf("%w: no tenant %q (platformctl tenant list shows them)", ErrNotFound, name)
	}
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: no tenant %q (platformctl tenant list shows them)", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("tenancy: read tenant %s: %w", name, err)
	}
	var t Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, fmt.Errorf("tenancy: tenant %s: damaged record: %w", name, err)
	}
	t.revision = e.Revision()
	return &t, nil
}

func (r *registry) list(ctx context.Context) ([]*Tenant, error) {
	kv, err := r.bind(ctx, false)
	if err != nil || kv == nil {
		return nil, err
	}
	names, err := kvutil.Keys(ctx, kv, ">")
	if err != nil {
		return nil, fmt.Errorf("tenancy: list tenants: %w", err)
	}
	out := make([]*Tenant, 0, len(names))
	for _, n := range names {
		t, err := r.get(ctx, n)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (r *registry) create(ctx context.Context, t *Tenant) error {
	return r.save(ctx, t, fmt.Sprintf("tenant %q exists", t.Name),
		func(kv jetstream.KeyValue, b []byte) (uint64, error) { return kv.Create(ctx, t.Name, b) })
}

func (r *registry) update(ctx context.Context, t *Tenant) error {
	return r.save(ctx, t, fmt.Sprintf("tenant %s was changed concurrently; run the command again", t.Name),
		func(kv jetstream.KeyValue, b []byte) (uint64, error) { return kv.Update(ctx, t.Name, b, t.revision) })
}

// save writes t by put (a create or a compare-and-set update) and keeps
// the revision written; a wrong revision is ErrConflict with conflict.
func (r *registry) save(ctx context.Context, t *Tenant, conflict string, put func(jetstream.KeyValue, []byte) (uint64, error)) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	kv, err := r.bind(ctx, true)
	if err != nil {
		return err
	}
	rev, err := put(kv, b)
	if jserr.WrongRevision(err) {
		return fmt.Errorf("%w: %s", ErrConflict, conflict)
	}
	if err != nil {
		return fmt.Errorf("tenancy: save tenant %s: %w", t.Name, err)
	}
	t.revision = rev
	return nil
}

func (r *registry) delete(ctx context.Context, t *Tenant) error {
	kv, err := r.bind(ctx, true)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, t.Name, jetstream.LastRevision(t.revision)); err != nil {
		return fmt.Errorf("tenancy: delete tenant %s: %w", t.Name, err)
	}
	return nil
}
