package tenancy_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/msgplatform/platform/tenancy"
)

// Four daemons change one tenant's registry record at once (each a user's
// roles). The registry bucket is replicated (R3), where nats-server 2.15
// reports most contended compare-and-set conflicts as 10164, not 10071:
// every change either lands or is refused as a conflict (ErrConflict,
// "run the command again"), never an unexplained error, and the record
// holds exactly the changes that landed.
func TestRegistryConflictsUnderContention(t *testing.T) {
	e := start(t, 3)
	c := ctx(t)
	e.tenant("acme", tenancy.DefaultQuota())
	managers := []*tenancy.Manager{e.m, e.another(), e.another(), e.another()}
	for i := range managers {
		if _, err := e.m.AddUser(c, "test", "acme", tenancy.UserSpec{Name: fmt.Sprintf("u%d", i), Sub: []string{"orders"}}); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]bool, len(managers)) // user i holds the viewer role
	conflicts := 0
	for round := range 12 {
		errs := make([]error, len(managers))
		done := make(chan int, len(managers))
		start := make(chan struct{})
		for i, m := range managers {
			go func() {
				<-start
				r := tenancy.RoleRequest{Tenant: "acme", User: fmt.Sprintf("u%d", i)}
				if want[i] {
					r.Remove = []string{tenancy.RoleViewer}
				} else {
					r.Add = []string{tenancy.RoleViewer}
				}
				_, errs[i] = m.SetUserRoles(c, "test", r)
				done <- i
			}()
		}
		close(start)
		for range managers {
			<-done
		}
		for i, err := range errs {
			switch {
			case err == nil:
				want[i] = !want[i]
			case errors.Is(err, tenancy.ErrConflict):
				conflicts++
			default:
				t.Fatalf("round %d: u%d's role change failed with an error that is not a conflict: %v", round, i, err)
			}
		}
		got, err := e.m.Get(c, "acme")
		if err != nil {
			t.Fatal(err)
		}
		for i := range managers {
			if has := slices.Contains(got.Users[fmt.Sprintf("u%d", i)].Roles, tenancy.RoleViewer); has != want[i] {
				t.Fatalf("round %d: u%d has viewer %v in the registry, want %v (the changes that landed)", round, i, has, want[i])
			}
		}
	}
	t.Logf("%d of %d changes refused as conflicts", conflicts, 12*len(managers))
}
