package attack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
)

// Class 2: quotas count what is stored. A tenant user tries to pass a
// bytes/s quota with big headers on tiny payloads, and to have events the
// store refuses counted as accepted.
func TestAttackQuotaCountsWhatIsStored(t *testing.T) {
	r := newRig(t, 1)
	r.mustCtl("tenant", "create", "noisy", "--publish-bytes-rate", "1MiB", "--policy", "reject", "--max-payload", "256KiB")
	r.mustCtl("tenant", "topic", "noisy", "orders", "--partitions", "1")
	prod := r.user("noisy", "producer", []string{"orders"}, nil)
	nc := r.connect(prod, "producer")
	js := natstest.JetStream(t, nc)

	t.Run("quota-header-bytes", func(t *testing.T) {
		// 60 KB of headers on 1-byte payloads for 3 s: 1 MiB/s lets about
		// 17 through a second, not 170.
		big := strings.Repeat("h", 60_000)
		before := r.msgs("noisy", "orders")
		var ok, refused int
		start := time.Now()
		for time.Since(start) < 3*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.k", Data: []byte("x"), Header: nats.Header{"X-Pad": []string{big}}})
			cancel()
			var apiErr *jetstream.APIError
			switch {
			case err == nil:
				ok++
			case errors.As(err, &apiErr) && apiErr.Code == 429:
				refused++
			default:
				t.Fatalf("publish: %v", err)
			}
		}
		elapsed := time.Since(start).Seconds()
		stored := r.msgs("noisy", "orders") - before
		// The burst is a tenth of a second of quota (or one max_payload).
		limit := (elapsed*float64(1<<20) + float64(256<<10)) / 60_000
		t.Logf("%.1fs: %d accepted, %d refused, %d stored; quota allows at most %.0f", elapsed, ok, refused, stored, limit)
		if float64(stored) > limit*1.1 || refused == 0 {
			t.Fatalf("%d events of 60 KB headers stored in %.1fs against a 1 MiB/s quota (at most %.0f)", stored, elapsed, limit)
		}
		if uint64(ok) != stored {
			t.Fatalf("%d acked but %d stored", ok, stored)
		}
		attack.Refused(t, "quota-header-bytes")
	})

	t.Run("quota-oversize-header-not-accepted", func(t *testing.T) {
		time.Sleep(time.Second) // let the byte bucket refill
		u0 := r.usage("noisy")
		before := r.msgs("noisy", "orders")
		_, err := js.PublishMsg(ctxT(t), &nats.Msg{Subject: "orders.k", Data: []byte("x"), Header: nats.Header{"X-Pad": []string{strings.Repeat("h", 70_000)}}})
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10097 {
			t.Fatalf("a 70 KB header: %v, want JetStream's header-too-big error (10097)", err)
		}
		u1 := r.usage("noisy")
		if u1.MsgsIn != u0.MsgsIn || u1.BytesIn != u0.BytesIn || u1.Refused != u0.Refused+1 {
			t.Fatalf("usage before %+v after %+v: the refused event must count as refused, not accepted", u0, u1)
		}
		if n := r.msgs("noisy", "orders"); n != before {
			t.Fatalf("stream went from %d to %d", before, n)
		}
		attack.Refused(t, "quota-oversize-header-not-accepted")
	})

	t.Run("quota-payload-at-limit-not-accepted", func(t *testing.T) {
		// Exactly max_payload as the client sends it: the connection
		// takes it, the stamped copy would not fit. Refused at the
		// ingest, counted as refused, and the ingest's connection stays
		// up (the next event is accepted).
		time.Sleep(time.Second)
		u0 := r.usage("noisy")
		before := r.msgs("noisy", "orders")
		hdr := nats.Header{"X-A": []string{"b"}}
		hdrLen := len("NATS/1.0\r\nX-A: b\r\n\r\n")
		_, err := js.PublishMsg(ctxT(t), &nats.Msg{Subject: "orders.k", Data: make([]byte, 256<<10-hdrLen), Header: hdr})
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10054 {
			t.Fatalf("an event of exactly max_payload: %v, want JetStream's message-too-big error (10054)", err)
		}
		time.Sleep(time.Second)
		if _, err := js.Publish(ctxT(t), "orders.k", []byte("next")); err != nil {
			t.Fatalf("the next event after a refused one: %v (the ingest's connection must survive)", err)
		}
		u1 := r.usage("noisy")
		if u1.MsgsIn != u0.MsgsIn+1 || u1.Refused != u0.Refused+1 {
			t.Fatalf("usage before %+v after %+v", u0, u1)
		}
		if n := r.msgs("noisy", "orders"); n != before+1 {
			t.Fatalf("stream went from %d to %d, want one more", before, n)
		}
		attack.Refused(t, "quota-payload-at-limit-not-accepted")
	})
}
