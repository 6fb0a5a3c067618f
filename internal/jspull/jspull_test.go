package jspull

import (
	"testing"
	"time"
)

func TestParseAckReply(t *testing.T) {
	t.Parallel()
	for r, want := range map[string][3]uint64{
		"orders_dlq.c1.1.17.5.1796031622018820084.2999":              {17, 5, 2999},
		"hub.ACCHASH.orders_dlq.c1.2.18.6.1796031622018820084.0.xyz": {18, 6, 0},
		"hub.ACCHASH.orders_dlq.c1.2.18.6.1796031622018820084.0":     {18, 6, 0},
	} {
		s, d, p, ok := ParseAckReply([]byte(r))
		if !ok || [3]uint64{s, d, p} != want {
			t.Errorf("%s: %d %d %d %v, want %v", r, s, d, p, ok, want)
		}
	}
	for _, bad := range []string{"", "a.b.c", "orders_dlq.c1.1.x.5.1.2", "s.c.1.2.3.4"} {
		if _, _, _, ok := ParseAckReply([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestStatusOf(t *testing.T) {
	t.Parallel()
	for b, want := range map[string]int{"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\n\r\n": 408,
		"NATS/1.0 100 Idle Heartbeat\r\n\r\n": 100, "NATS/1.0\r\nA: 1\r\n\r\n": 0, "": 0, "NATS/1.0 4x": 0} {
		if got := StatusOf([]byte(b)); got != want {
			t.Errorf("StatusOf(%q) = %d, want %d", b, got, want)
		}
	}
}

// The body is the server's JSApiConsumerGetNextRequest, durations in
// nanoseconds; an unset expiry or heartbeat is left out.
func TestRequestBody(t *testing.T) {
	t.Parallel()
	for r, want := range map[Request]string{
		{Batch: 1024, Expires: 5 * time.Second}:                             `{"batch":1024,"expires":5000000000}`,
		{Batch: 3, Expires: time.Second, Heartbeat: 250 * time.Millisecond}: `{"batch":3,"expires":1000000000,"idle_heartbeat":250000000}`,
		{Batch: 1}: `{"batch":1}`,
	} {
		if got := string(r.Body()); got != want {
			t.Errorf("%+v: %s, want %s", r, got, want)
		}
	}
	if got := NextSubject("$JS.API.", "ORDERS", "c1"); got != "$JS.API.CONSUMER.MSG.NEXT.ORDERS.c1" {
		t.Errorf("NextSubject: %s", got)
	}
}
