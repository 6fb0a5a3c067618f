package outboxrelay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
)

// TestTwoOutboxesOneDatabase: two outboxes in one PostgreSQL database
// (schemas billing_outbox and shipping_outbox), each with its own
// migrations, fencing token and relay (its own lease). Both relay all
// their events, in per-key order, exactly once; a relay of one outbox
// never touches the other (the billing relay is stopped while shipping
// drains, and billing's events stay unsent until it restarts); and a
// fencing token recorded in one schema does not fence the other.
func TestTwoOutboxesOneDatabase(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: "Bad-Schema"}); !errors.Is(err, outboxrelay.ErrInvalidConfig) {
		t.Fatalf("Open with schema Bad-Schema: %v, want ErrInvalidConfig", err)
	}
	open := func(schema string) *pgoutbox.Store {
		s, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // idempotent
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	billing, shipping := open("billing_outbox"), open("shipping_outbox")
	enqueue := func(s *pgoutbox.Store, evs []outboxrelay.Event) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, ev := range evs {
				if err := s.Enqueue(ctx, tx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	billEvs := events("bill", "billing", 5, 20)
	shipEvs := events("ship", "shipping", 5, 20)
	enqueue(billing, billEvs)
	enqueue(shipping, shipEvs)

	fx := newFixture(t)
	fx.createTopic(t, "billing")
	fx.createTopic(t, "shipping")

	shipRelay, shipErrc := fx.startRelay(t, testConfig("shipping"), shipping)
	fx.deliveredOnce(t, shipping, "shipping", shipEvs, shipRelay)
	if st, err := billing.Stats(ctx); err != nil || st.Unsent != int64(len(billEvs)) {
		t.Fatalf("billing while only the shipping relay ran: %+v, %v; want %d unsent", st, err, len(billEvs))
	}
	billRelay, billErrc := fx.startRelay(t, testConfig("billing"), billing)
	fx.deliveredOnce(t, billing, "billing", billEvs, billRelay)
	if err := billRelay.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The billing relay left shipping's stream as it was.
	checkDelivered(t, fx.readStream(t, "shipping"), shipEvs, false)
	// Fencing is per schema: billing's higher token fences nothing in
	// shipping, and fences billing's older one.
	if err := billing.Fence(ctx, 1<<40); err != nil {
		t.Fatal(err)
	}
	if err := shipping.Fence(ctx, 1<<39); err != nil {
		t.Fatalf("shipping fenced by billing's token: %v", err)
	}
	if err := billing.MarkSent(ctx, 1<<39, []uint64{1}); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("billing mark with an older token: %v, want ErrFenced", err)
	}
	for _, errc := range []<-chan error{shipErrc, billErrc} {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("relay: %v", err)
			}
		default:
		}
	}
}
