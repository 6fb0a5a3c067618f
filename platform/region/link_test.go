package region

import (
	"slices"
	"testing"

	"github.com/msgplatform/platform/platform"
)

// TestLinkTableDeny: the deny list holds the configured subjects first,
// every resident's subjects and stream API once, and the gate's forward
// subject; the order residents are added in does not change it, and a
// name keeps the region it was first added with.
func TestLinkTableDeny(t *testing.T) {
	orders := platform.DefaultTopicSpec("orders")
	orders.Residency = "eu"
	jobs := platform.DefaultQueueSpec("jobs")
	jobs.Residency = "us"
	open := platform.DefaultTopicSpec("open")
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders, "open": open},
		Queues: map[string]platform.QueueSpec{"jobs": jobs},
	}

	a := LinkTable{Configured: []string{"secret.>", "secret.>"}}
	a.AddCatalog(cat)
	a.Add("invoices", "us")
	a.Add("orders", "us") // known: stays eu
	b := LinkTable{Configured: []string{"secret.>"}}
	b.Add("invoices", "us")
	b.AddCatalog(cat)

	deny := a.Deny()
	if !slices.Equal(deny, b.Deny()) {
		t.Fatalf("deny list depends on the order residents were added:\n%v\n%v", deny, b.Deny())
	}
	if deny[0] != "secret.>" || slices.Index(deny[1:], "secret.>") >= 0 {
		t.Errorf("configured subject not first and once: %v", deny)
	}
	for _, name := range []string{"orders", "jobs", "invoices"} {
		for _, s := range ResidentDeny(name) {
			if !slices.Contains(deny, s) {
				t.Errorf("%s: %s missing from %v", name, s, deny)
			}
		}
	}
	if slices.Contains(deny, "open.>") {
		t.Errorf("non-resident topic open denied: %v", deny)
	}
	if !slices.Equal(deny[len(deny)-2:], FixedLinkDeny()) {
		t.Errorf("fixed subjects (gate forward, source deliveries) not last: %v", deny)
	}
	if got := slices.Compact(slices.Sorted(slices.Values(deny))); len(got) != len(deny) {
		t.Errorf("a subject appears twice: %v", deny)
	}
	want := map[string]string{"orders": "eu", "jobs": "us", "invoices": "us"}
	if len(a.Residents) != len(want) {
		t.Errorf("residents %v, want %v", a.Residents, want)
	}
	for n, r := range want {
		if a.Residents[n] != r {
			t.Errorf("resident %s in %q, want %q", n, a.Residents[n], r)
		}
	}
}
