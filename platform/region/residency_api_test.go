package region

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// serverAPIConstants returns every string constant of nats-server's
// jetstream_api.go whose value is a $JS subject, by name, read from the
// module this repository builds with.
func serverAPIConstants(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nats-io/nats-server/v2").Output()
	if err != nil {
		t.Skipf("go list -m nats-server: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "server", "jetstream_api.go"))
	if err != nil {
		t.Fatalf("read the server's jetstream_api.go: %v", err)
	}
	re := regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*"(\$JS\.[^"]*)"`)
	consts := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		consts[m[1]] = m[2]
	}
	if len(consts) < 40 {
		t.Fatalf("only %d $JS constants parsed from jetstream_api.go: the parser no longer fits the source", len(consts))
	}
	return consts
}

// TestStreamAPIClassifiesEveryServerSubject: every subject template of the
// server's JetStream API that has a variable token (a %s argument, or a
// wildcard without a %s sibling) is in jsStreamAPI with the server's exact
// value, so no API that names a stream crosses a link unclassified.
func TestStreamAPIClassifiesEveryServerSubject(t *testing.T) {
	consts := serverAPIConstants(t)
	table := map[string]streamAPI{}
	for _, a := range jsStreamAPI {
		table[a.Const] = a
		if v, ok := consts[a.Const]; !ok || v != a.Template {
			t.Errorf("jsStreamAPI %s = %q; the server has %q", a.Const, a.Template, v)
		}
		if n := strings.Count(a.Template, "%s"); a.Stream >= n {
			t.Errorf("jsStreamAPI %s: stream argument %d of %d", a.Const, a.Stream, n)
		}
	}
	var unclassified []string
	for name, v := range consts {
		variable := strings.Contains(v, "%s")
		wildcard := strings.ContainsAny(v, "*>")
		if _, ok := table[name]; ok {
			continue
		}
		if variable {
			unclassified = append(unclassified, name+" = "+v)
			continue
		}
		if wildcard {
			if _, ok := table[name+"T"]; !ok {
				unclassified = append(unclassified, name+" = "+v)
			}
		}
	}
	slices.Sort(unclassified)
	if len(unclassified) > 0 {
		t.Fatalf("server JetStream API subjects not classified in jsStreamAPI:\n%s", strings.Join(unclassified, "\n"))
	}
}

// TestStreamDenyCoversReadingRoutes: the deny list of a stream holds the
// subjects the routes that read it use (nats consumer next, stream backup,
// stream get, direct get, a cross-domain mirror's consumer, acks), in the
// domain form a client of the other region sends, and never its metadata.
func TestStreamDenyCoversReadingRoutes(t *testing.T) {
	deny := StreamDeny("ORDERS_EU")
	matches := func(subj string) bool {
		for _, d := range deny {
			if subjectWithin(subj, d) {
				return true
			}
		}
		return false
	}
	for _, subj := range []string{
		"$JS.eu.API.CONSUMER.MSG.NEXT.ORDERS_EU.grp",
		"$JS.eu.API.CONSUMER.CREATE.ORDERS_EU",
		"$JS.eu.API.CONSUMER.CREATE.ORDERS_EU.c.orders.eu.>",
		"$JS.eu.API.CONSUMER.DURABLE.CREATE.ORDERS_EU.c",
		"$JS.eu.API.STREAM.SNAPSHOT.ORDERS_EU",
		"$JS.SNAPSHOT.ACK.ORDERS_EU.abc",
		"$JS.eu.API.STREAM.MSG.GET.ORDERS_EU",
		"$JS.eu.API.DIRECT.GET.ORDERS_EU",
		"$JS.eu.API.DIRECT.GET.ORDERS_EU.orders.eu.k",
		"$JS.eu.API.STREAM.UPDATE.ORDERS_EU",
		"$JS.eu.API.STREAM.PURGE.ORDERS_EU",
		"$JS.eu.API.CONSUMER.RESET.ORDERS_EU.grp",
		"$JS.API.CONSUMER.MSG.NEXT.ORDERS_EU.grp",
		"$JS.ACK.ORDERS_EU.grp.1.1.1.1.0",
		"$JS.ACK.eu.ACCHASH.ORDERS_EU.grp.1.1.1.1.0.tok",
		"$JS.FC.eu.ACCHASH.ORDERS_EU.grp.x",
	} {
		if !matches(subj) {
			t.Errorf("%s is not denied for ORDERS_EU", subj)
		}
	}
	for _, subj := range []string{"$JS.eu.API.STREAM.INFO.ORDERS_EU", "$JS.eu.API.STREAM.LIST", "$JS.eu.API.CONSUMER.MSG.NEXT.ORDERS", "$JS.eu.API.CONSUMER.INFO.ORDERS_EU.grp"} {
		if matches(subj) {
			t.Errorf("%s is denied for ORDERS_EU", subj)
		}
	}
}
