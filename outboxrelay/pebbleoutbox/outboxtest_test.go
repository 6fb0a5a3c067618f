package pebbleoutbox_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/outboxtest"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
)

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(string, ...any) {}

// TestStoreContract runs the shared backend suite against Pebble.
func TestStoreContract(t *testing.T) {
	outboxtest.Run(t, outboxtest.Harness{Open: func(t *testing.T) (outboxrelay.Store, outboxtest.Enqueue) {
		db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quietLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s, func(_ context.Context, evs ...outboxrelay.Event) error {
			return s.Update(func(b *pebble.Batch) error {
				for _, ev := range evs {
					if err := s.Enqueue(b, ev); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}})
}
