package pebbleinbox_test

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
)

type quiet struct{}

func (quiet) Infof(string, ...any)      {}
func (quiet) Errorf(string, ...any)     {}
func (quiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// openDB opens an empty Pebble database in t's temp dir, closed when t ends.
func openDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newInbox(t *testing.T, cfg platform.InboxConfig) (*pebble.DB, *pebbleinbox.Inbox) {
	t.Helper()
	db := openDB(t)
	in, err := pebbleinbox.New(db, cfg, pebbleinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db, in
}
