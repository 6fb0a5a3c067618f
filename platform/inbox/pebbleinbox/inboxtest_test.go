package pebbleinbox_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/inboxtest"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
)

// TestInboxContract runs the shared inbox suite against Pebble.
func TestInboxContract(t *testing.T) {
	inboxtest.Run(t, inboxtest.Harness[*pebble.Batch]{
		Open: func(t *testing.T, cfg platform.InboxConfig) *inboxtest.Backend[*pebble.Batch] {
			db, in := newInbox(t, cfg)
			var n atomic.Int64
			return &inboxtest.Backend[*pebble.Batch]{
				Inbox: in,
				Write: func(b *pebble.Batch, name string) error {
					return b.Set([]byte(fmt.Sprintf("fx/%s\x00%d", name, n.Add(1))), nil, nil)
				},
				Count: func(t *testing.T, name string) int {
					t.Helper()
					it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("fx/" + name + "\x00"), UpperBound: []byte("fx/" + name + "\x01")})
					if err != nil {
						t.Fatal(err)
					}
					defer it.Close()
					c := 0
					for ok := it.First(); ok; ok = it.Next() {
						c++
					}
					return c
				},
				Seen:        func(_ context.Context, id string) (bool, error) { return in.Seen(id) },
				Prune:       in.Prune,
				PruneBefore: in.PruneBefore,
				IfNewer: func(_ context.Context, b *pebble.Batch, entity string, version int64) (bool, error) {
					return in.IfNewer(b, entity, uint64(version))
				},
				ProcessBatch: in.ProcessBatch,
			}
		},
		New: func(t *testing.T, cfg platform.InboxConfig) error {
			_, err := pebbleinbox.New(openDB(t), cfg, pebbleinbox.Options{})
			return err
		},
	})
}
