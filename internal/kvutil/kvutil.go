package kvutil

import (
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Open binds the bucket cfg.Bucket, creating it with cfg when it does not
// exist; an existing bucket keeps its config.
func Open(ctx context.Context, js jetstream.KeyValueManager, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// OpenKeep binds the bucket cfg.Bucket, creating it with cfg when it does
// not exist; a bucket that exists, or that another process creates while
// it tries, is used as it is, its config never updated.
func OpenKeep(ctx context.Context, js jetstream.KeyValueManager, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if err != nil {
		if found, ferr := js.KeyValue(ctx, cfg.Bucket); ferr == nil {
			return found, nil
		}
	}
	return kv, err
}

// Lookup binds the bucket named bucket; nil and no error if it does not
// exist.
func Lookup(ctx context.Context, js jetstream.KeyValueManager, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return kv, err
}

// Keys returns the keys of kv that match filter (a subject filter such as
// "req.*"; ">" for every key), sorted.
func Keys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	kl, err := kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = kl.Stop() }()
	var keys []string
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}
