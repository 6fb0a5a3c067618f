package redrive

import (
	"errors"
	"testing"
)

// The decisions of Access on their own: destinations by subject shape,
// rates against the quota, requests by the groups their entries came
// from, and roles that let a caller see but not act.
func TestAccessDecisions(t *testing.T) {
	a := Access{Principal: "u@t", Tenant: "t", MaxRate: 50,
		Consume: map[string]bool{"orders": true}, ConsumeGroups: map[string]string{"fraud": "payments"},
		Publish: map[string]string{"orders": "topic", "jobs": "queue", "pay": "topic"}}
	for _, tc := range []struct {
		object, dest string
		ok           bool
	}{
		{"orders", "", true},
		{"payments", "", false}, // back into payments: no --pub payments
		{"payments", "orders.k1", true},
		{"payments", "orders.k1.x", false}, // a topic subject is <topic>.<key>, one token
		{"payments", "orders.", false},
		{"payments", "orders", false},
		{"payments", "jobs.a.b.c", true}, // a queue takes any subject below it
		{"payments", "payments.k", false},
		{"payments", "pay.k", true},
		{"payments", "payx.k", false},
		{"payments", "$JS.API.STREAM.DELETE.orders", false},
	} {
		err := a.mayPublish(tc.object, "topic", tc.dest)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("mayPublish(%s, %q) = %v, want ok %v", tc.object, tc.dest, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		rate, want float64
		ok         bool
	}{{0, 50, true}, {10, 10, true}, {50, 50, true}, {51, 51, false}} {
		r := Request{Rate: tc.rate}
		err := a.capRate(&r)
		if (err == nil) != tc.ok || r.Rate != tc.want || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("capRate(%g) = %g, %v; want %g, ok %v", tc.rate, r.Rate, err, tc.want, tc.ok)
		}
	}
	if r := (Request{Rate: 0}); (Access{All: true, MaxRate: 50}).capRate(&r) != nil || r.Rate != 0 {
		t.Errorf("full access is capped: %g", r.Rate)
	}
	fraudOnly := &Redrive{ID: "r1", Object: "payments", ConsumerGroups: []string{"fraud"}}
	mixed := &Redrive{ID: "r2", Object: "payments", ConsumerGroups: []string{"fraud", "ledger"}}
	old := &Redrive{ID: "r3", Object: "payments"} // filed before groups were recorded
	if err := a.maySeeRequest(fraudOnly); err != nil {
		t.Errorf("a fraud-only request: %v", err)
	}
	for _, r := range []*Redrive{mixed, old} {
		if err := a.maySeeRequest(r); !errors.Is(err, ErrForbidden) {
			t.Errorf("request %s with groups %v: %v, want refused", r.ID, r.ConsumerGroups, err)
		}
	}
	if !a.MaySee("payments") || !a.MaySee("orders") || a.MaySee("refunds") {
		t.Error("MaySee: want payments (a group) and orders, not refunds")
	}
	viewer := Access{Principal: "v@t", Viewer: true}
	if err := viewer.maySeeRequest(mixed); err != nil {
		t.Errorf("a viewer seeing a request: %v", err)
	}
	for _, verb := range []string{verbApprove, verbRedrive} {
		if err := viewer.mayAct("payments", mixed, verb); !errors.Is(err, ErrForbidden) {
			t.Errorf("a viewer may %s: %v", verb, err)
		}
	}
	approver := Access{Principal: "a@t", Viewer: true, Approver: true}
	if approver.mayAct("payments", mixed, verbApprove) != nil || approver.mayAct("payments", mixed, verbRedrive) == nil {
		t.Error("an approver approves and does not redrive")
	}
	operator := Access{Principal: "o@t", Viewer: true, Operator: true}
	if operator.mayAct("payments", nil, verbRedrive) != nil || operator.mayAct("payments", mixed, verbApprove) == nil {
		t.Error("an operator redrives and does not approve")
	}
	if err := a.mayAct("payments", mixed, verbApprove); !errors.Is(err, ErrForbidden) {
		t.Errorf("a fraud consumer approving a request with ledger entries: %v", err)
	}
	if err := a.mayAct("payments", fraudOnly, verbApprove); err != nil {
		t.Errorf("a fraud consumer approving a fraud-only request: %v", err)
	}
}
