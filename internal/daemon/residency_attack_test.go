package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/region"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
)

// residencyAttack is a platformd in mode regions (eu home with orders.eu
// resident, orders not; us) with five events in orders.eu, seen by an
// attacker who holds the platform admin creds of both regions: jsEU and
// jsUS on each region's own connection, jsUSeu the eu domain reached from
// us through the link, and the real nats CLI.
type residencyAttack struct {
	t                  *testing.T
	d                  *daemon.Daemon
	nc, usNC           *nats.Conn
	jsEU, jsUS, jsUSeu jetstream.JetStream
	euURL, usURL       string
	natsBin, creds     string
}

func newResidencyAttack(t *testing.T) *residencyAttack {
	t.Helper()
	d, nc := startRegionsDaemon(t)
	a := &residencyAttack{t: t, d: d, nc: nc, euURL: d.RegionClientURLs("eu"), usURL: d.RegionClientURLs("us")}
	usNC := daemontest.Admin(t, d.Trust(), a.usURL)
	a.usNC = usNC
	a.jsEU, a.jsUS = natstest.JetStream(t, nc), natstest.JetStream(t, usNC)
	var err error
	if a.jsUSeu, err = jetstream.NewWithDomain(usNC, "eu"); err != nil {
		t.Fatal(err)
	}
	creds, err := d.Trust().AdminCreds()
	if err != nil {
		t.Fatal(err)
	}
	a.creds = filepath.Join(t.TempDir(), "admin.creds")
	if err := os.WriteFile(a.creds, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	a.natsBin, err = exec.LookPath("nats")
	if err != nil {
		home, _ := os.UserHomeDir()
		a.natsBin = filepath.Join(home, "go", "bin", "nats")
		if _, err := os.Stat(a.natsBin); err != nil {
			t.Skip("nats CLI not installed (scripts/test installs it: go install github.com/nats-io/natscli/nats@v0.5.0)")
		}
	}
	ctx := a.ctx(30 * time.Second)
	for i := range 5 {
		if _, err := a.jsEU.Publish(ctx, platform.TopicSubject("orders.eu", fmt.Sprintf("order:%d", i)), fmt.Appendf(nil, `{"card":"4111-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *residencyAttack) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	a.t.Cleanup(cancel)
	return ctx
}

// cli runs the nats CLI against url and returns its output and whether it
// succeeded.
// mirrorOrders mirrors the non-resident topic orders to us through the
// control API.
func (a *residencyAttack) mirrorOrders(ctx context.Context) {
	a.t.Helper()
	if err := control.Call(ctx, a.nc, region.SubjMirror, region.MirrorRequest{Topic: "orders", To: "us"}, nil); err != nil {
		a.t.Fatalf("mirror orders to us: %v", err)
	}
}

func (a *residencyAttack) cli(url string, args ...string) (string, error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append([]string{"--server", url, "--creds", a.creds, "--no-context", "--timeout", "3s"}, args...)
	cmd := exec.CommandContext(ctx, a.natsBin, all...)
	cmd.Env = append(os.Environ(), "HOME="+a.t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// denied runs the nats CLI against us and fails unless the command
// fails for want of a responder (the link denies its request) and prints
// no resident payload.
func (a *residencyAttack) denied(what string, args ...string) {
	a.t.Helper()
	out, err := a.cli(a.usURL, args...)
	if err == nil || !strings.Contains(out, "no responders") || strings.Contains(out, "4111") {
		a.t.Fatalf("%s from us: want no responders and no event, got %v\n%s", what, err, out)
	}
}

// usState is every stream of us with its message count (but the
// residency audit stream, where refusals are recorded).
func (a *residencyAttack) usState() map[string]uint64 {
	a.t.Helper()
	out := map[string]uint64{}
	l := a.jsUS.ListStreams(a.ctx(10 * time.Second))
	for si := range l.Info() {
		if si.Config.Name != region.AuditStream {
			out[si.Config.Name] = si.State.Msgs
		}
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		a.t.Fatalf("list us streams: %v", err)
	}
	return out
}

// unchangedUS fails unless us holds exactly the streams and counts of
// before.
func (a *residencyAttack) unchangedUS(before map[string]uint64) {
	a.t.Helper()
	if after := a.usState(); !maps.Equal(before, after) {
		a.t.Fatalf("us changed: streams before %v, after %v", before, after)
	}
}

func (a *residencyAttack) msgs(js jetstream.JetStream, stream string) uint64 {
	a.t.Helper()
	s, err := js.Stream(a.ctx(10*time.Second), stream)
	if err != nil {
		a.t.Fatalf("stream %s: %v", stream, err)
	}
	return s.CachedInfo().State.Msgs
}

// fetchedAcross is how many messages a pull of up to n from consumer
// of stream in eu, made from us through the link, delivers (0 when the
// consumer or the pull is refused).
func (a *residencyAttack) fetchedAcross(ctx context.Context, stream, consumer string, n int) int {
	got := 0
	if rc, err := a.jsUSeu.Consumer(ctx, stream, consumer); err == nil {
		if b, err := rc.Fetch(n, jetstream.FetchMaxWait(time.Second)); err == nil {
			for range b.Messages() {
				got++
			}
		}
	}
	return got
}

// consumerInfo is c's state as eu reports it now.
func (a *residencyAttack) consumerInfo(ctx context.Context, c jetstream.Consumer) *jetstream.ConsumerInfo {
	a.t.Helper()
	ci, err := c.Info(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	return ci
}

// waitMsgs waits until stream holds n messages.
func (a *residencyAttack) waitMsgs(js jetstream.JetStream, stream string, n uint64) {
	a.t.Helper()
	natstest.WaitFor(a.t, 20*time.Second, func() error {
		if got := a.msgs(js, stream); got != n {
			return fmt.Errorf("stream %s holds %d messages, want %d", stream, got, n)
		}
		return nil
	})
}

// listen counts the core messages us receives on subject.
func (a *residencyAttack) listen(subject string) *atomic.Int64 {
	a.t.Helper()
	var n atomic.Int64
	sub, err := a.usNC.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := a.usNC.Flush(); err != nil {
		a.t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // interest crosses the link
	return &n
}

// refusedByResidency fails unless err is the residency gate's refusal
// naming want.
func refusedByResidency(t *testing.T, what string, err error, want string) {
	t.Helper()
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != region.GateErrCode || !strings.Contains(apiErr.Description, want) {
		t.Fatalf("%s: want the residency gate's refusal naming %q, got %T %v", what, want, err, err)
	}
}

// TestAttackPropagatedCopyMirroredAbroad: a region admin copies the
// resident orders.eu into a stream of its own region (allowed: it stays
// in eu), then a copy of that copy, while us listens on $JS.S.> (the
// deliveries of sources): us hears nothing. An in-region mirror of the
// copy is refused. It tries to mirror or source either copy into us with
// the nats CLI and nats.go. Each is refused naming orders.eu; us is
// unchanged; the copies cannot be read from us either;
// the residency report lists both copies as orders.eu's.
func TestAttackPropagatedCopyMirroredAbroad(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(90 * time.Second)
	// JetStream delivers a stream's sources on $JS.S.<id>: a listener in
	// us on every such subject hears nothing of the in-region copies.
	sourced := a.listen("$JS.S.>")
	copyCfg := jetstream.StreamConfig{Name: "orders_eu_copy", Replicas: 1, Sources: []*jetstream.StreamSource{{Name: platform.StreamName("orders.eu")}}}
	b, _ := json.Marshal(copyCfg)
	file := filepath.Join(t.TempDir(), "copy.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := a.cli(a.euURL, "stream", "add", copyCfg.Name, "--config", file); err != nil {
		t.Fatalf("in-region copy refused: %v\n%s", err, out)
	}
	if _, err := a.jsEU.CreateStream(ctx, jetstream.StreamConfig{Name: "orders_eu_copy2", Replicas: 1, Sources: []*jetstream.StreamSource{{Name: "orders_eu_copy"}}}); err != nil {
		t.Fatalf("in-region copy of the copy: %v", err)
	}
	a.waitMsgs(a.jsEU, "orders_eu_copy", 5)
	a.waitMsgs(a.jsEU, "orders_eu_copy2", 5)
	if n := sourced.Load(); n != 0 {
		t.Fatalf("us heard %d deliveries of the in-region copies on $JS.S.>", n)
	}
	// An in-region mirror delivers on $JS.M.<id>, which the link carries
	// for the mirrors across regions: refused, source instead.
	_, err := a.jsEU.CreateStream(ctx, jetstream.StreamConfig{Name: "orders_eu_mirror", Replicas: 1, Mirror: &jetstream.StreamSource{Name: "orders_eu_copy"}})
	refusedByResidency(t, "in-region mirror of the copy", err, "source it instead")
	if _, err := a.jsEU.Stream(ctx, "orders_eu_mirror"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("refused in-region mirror exists: %v", err)
	}
	before := a.usState()

	// Domain is not in a configuration's JSON: the nats CLI's file names
	// the other domain's API prefix.
	mirror := jetstream.StreamConfig{Name: "stolen", Replicas: 1, Mirror: &jetstream.StreamSource{Name: "orders_eu_copy", External: &jetstream.ExternalStream{APIPrefix: "$JS.eu.API"}}}
	b, _ = json.Marshal(mirror)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := a.cli(a.usURL, "stream", "add", "stolen", "--config", file)
	if err == nil || !strings.Contains(out, "topic orders.eu (through stream orders_eu_copy) is resident in eu") {
		t.Fatalf("nats stream add mirror of the copy in us: want the residency refusal, got %v\n%s", err, out)
	}
	_, err = a.jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "stolen2", Replicas: 1, Mirror: &jetstream.StreamSource{Name: "orders_eu_copy2", Domain: "eu"}})
	refusedByResidency(t, "mirror of the copy of the copy", err, "topic orders.eu (through stream orders_eu_copy2) is resident in eu")
	_, err = a.jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "stolen3", Replicas: 1, Subjects: []string{"stolen3.>"}, Sources: []*jetstream.StreamSource{{Name: "orders_eu_copy", Domain: "eu"}}})
	refusedByResidency(t, "source of the copy", err, "resident in eu")
	// A plain stream in us, then a source of the copy added to it.
	if _, err := a.jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "us_plain", Replicas: 1, Subjects: []string{"us.plain.>"}}); err != nil {
		t.Fatal(err)
	}
	before["us_plain"] = 0
	_, err = a.jsUS.UpdateStream(ctx, jetstream.StreamConfig{Name: "us_plain", Replicas: 1, Subjects: []string{"us.plain.>"}, Sources: []*jetstream.StreamSource{{Name: "orders_eu_copy", Domain: "eu"}}})
	refusedByResidency(t, "update adding a source of the copy", err, "resident in eu")

	// The copies are resident: nothing reads them from us.
	a.denied("nats stream get of the copy", "--js-domain", "eu", "stream", "get", "orders_eu_copy", "1")
	time.Sleep(2 * time.Second) // a starved mirror would have started by now
	a.unchangedUS(before)
	if s, err := a.jsUS.Stream(ctx, "us_plain"); err != nil || len(s.CachedInfo().Config.Sources) != 0 {
		t.Fatalf("us_plain after the refused update: %v %+v", err, s)
	}

	var rep region.Report
	if err := control.Call(ctx, a.nc, region.SubjReport, nil, &rep); err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, tr := range rep.Topics {
		if tr.Topic == "orders.eu" {
			for _, c := range tr.Copies {
				copies = append(copies, c.Region+":"+c.Stream+"<"+c.How+":"+c.Of)
			}
		}
	}
	for _, want := range []string{"eu:orders_eu_copy<source:orders_eu", "eu:orders_eu_copy2<source:orders_eu_copy"} {
		if !slices.Contains(copies, want) {
			t.Errorf("residency report: orders.eu copies %v lack %s", copies, want)
		}
	}
	if len(rep.Violations) != 0 {
		t.Errorf("residency report violations: %v", rep.Violations)
	}
	attack.Refused(t, "propagated-copy-mirror")
}

// TestAttackRepublishAcrossLink: a region admin adds a republish of the
// resident orders.eu onto leak.> (nats CLI stream edit, nats.go update),
// or creates a stream in eu sourcing it with such a republish, while a
// subscriber in us listens on leak.>. Every request is refused; the
// topic keeps no republish; us receives nothing of five more events.
func TestAttackRepublishAcrossLink(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	leaked := a.listen("leak.>")
	s, err := a.jsEU.Stream(ctx, platform.StreamName("orders.eu"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "leak.>"}
	b, _ := json.Marshal(cfg)
	file := filepath.Join(t.TempDir(), "edit.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := a.cli(a.euURL, "stream", "edit", cfg.Name, "--config", file, "--force"); err == nil || !strings.Contains(out, "republish") {
		t.Fatalf("nats stream edit adding a republish to leak.>: want the residency refusal, got %v\n%s", err, out)
	}
	_, err = a.jsEU.UpdateStream(ctx, cfg)
	refusedByResidency(t, "update with republish to leak.>", err, "topic orders.eu is resident in eu")
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "leak.{{wildcard(1)}}"}
	_, err = a.jsEU.UpdateStream(ctx, cfg)
	refusedByResidency(t, "update with republish to a mapped destination", err, "resident in eu")
	_, err = a.jsEU.CreateStream(ctx, jetstream.StreamConfig{Name: "fanout", Replicas: 1,
		Sources:   []*jetstream.StreamSource{{Name: platform.StreamName("orders.eu")}},
		RePublish: &jetstream.RePublish{Source: ">", Destination: "leak.fan.>"}})
	refusedByResidency(t, "in-region copy with republish", err, "resident in eu")
	if _, err := a.jsEU.Stream(ctx, "fanout"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("refused fanout exists: %v", err)
	}
	for i := range 5 {
		if _, err := a.jsEU.Publish(ctx, platform.TopicSubject("orders.eu", fmt.Sprintf("order:x%d", i)), []byte(`{"card":"4111"}`)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	if n := leaked.Load(); n != 0 {
		t.Fatalf("%d resident events received in us on leak.>", n)
	}
	if s, err := a.jsEU.Stream(ctx, cfg.Name); err != nil || s.CachedInfo().Config.RePublish != nil {
		t.Fatalf("orders.eu after the refused edits: %v, republish %+v", err, s.CachedInfo().Config.RePublish)
	}
	attack.Refused(t, "republish-across-link")
}

// TestAttackConsumerNextAcrossLink: an admin in us pulls from a consumer
// of the resident orders.eu in eu with `nats consumer next --js-domain
// eu`, with nats.go (Fetch through the domain, an ephemeral consumer)
// and with a raw MSG.NEXT request. Nothing is delivered; the consumer's
// state in eu is unchanged (nothing delivered, ack floor 0, 5 pending).
func TestAttackConsumerNextAcrossLink(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	stream := platform.StreamName("orders.eu")
	c, err := a.jsEU.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "attack-grp", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	before := a.usState()
	a.denied("nats consumer next", "--js-domain", "eu", "consumer", "next", stream, "attack-grp", "--count", "5", "--ack")
	a.denied("nats consumer add", "--js-domain", "eu", "consumer", "add", stream, "stolen", "--pull", "--defaults")
	got := a.fetchedAcross(ctx, stream, "attack-grp", 5)
	if _, err := a.jsUSeu.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err == nil {
		t.Fatal("ephemeral consumer on orders.eu created from us")
	}
	inbox := nats.NewInbox()
	sub, err := a.usNC.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.usNC.PublishRequest("$JS.eu.API.CONSUMER.MSG.NEXT."+stream+".attack-grp", inbox, []byte(`{"batch":5,"expires":1000000000}`))
	for {
		m, err := sub.NextMsg(1500 * time.Millisecond)
		if err != nil {
			break
		}
		if len(m.Data) > 0 {
			got++
		}
	}
	if got != 0 {
		t.Fatalf("%d resident events delivered to us", got)
	}
	ci := a.consumerInfo(ctx, c)
	if ci.Delivered.Consumer != 0 || ci.AckFloor.Consumer != 0 || ci.NumPending != 5 {
		t.Fatalf("consumer state changed: delivered %d, ack floor %d, pending %d", ci.Delivered.Consumer, ci.AckFloor.Consumer, ci.NumPending)
	}
	a.unchangedUS(before)
	attack.Refused(t, "consumer-next-across-link")
}

// TestAttackQueueNextAcrossLink: a queue resident in eu, applied through
// the control API, with three jobs; an admin in us pulls its workers
// consumer with `nats consumer next --js-domain eu` and nats.go. Nothing
// is delivered; the jobs stay queued, none delivered.
func TestAttackQueueNextAcrossLink(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	q := platform.DefaultQueueSpec("jobs.eu")
	q.Replicas, q.Residency = 1, "eu"
	if err := control.Call(ctx, a.nc, control.SubjQueueApply, control.ApplyQueueRequest{Spec: q}, nil); err != nil {
		t.Fatalf("apply queue jobs.eu: %v", err)
	}
	stream := platform.StreamName(q.Name)
	for i := range 3 {
		if _, err := a.jsEU.Publish(ctx, fmt.Sprintf("jobs.eu.ship.%d", i), []byte(`{"card":"4111"}`)); err != nil {
			t.Fatal(err)
		}
	}
	before := a.usState()
	a.denied("nats consumer next on the resident queue", "--js-domain", "eu", "consumer", "next", stream, platform.QueueConsumer, "--count", "3", "--ack")
	got := a.fetchedAcross(ctx, stream, platform.QueueConsumer, 3)
	if got != 0 {
		t.Fatalf("%d resident jobs delivered to us", got)
	}
	c, err := a.jsEU.Consumer(ctx, stream, platform.QueueConsumer)
	if err != nil {
		t.Fatal(err)
	}
	ci := a.consumerInfo(ctx, c)
	if ci.Delivered.Consumer != 0 || ci.NumPending != 3 || a.msgs(a.jsEU, stream) != 3 {
		t.Fatalf("queue changed: delivered %d, pending %d, stored %d", ci.Delivered.Consumer, ci.NumPending, a.msgs(a.jsEU, stream))
	}
	a.unchangedUS(before)
	attack.Refused(t, "queue-next-across-link")
}

// TestAttackStreamBackupAcrossLink: an admin in us backs up the resident
// orders.eu with `nats stream backup --js-domain eu`, reads a message with
// `nats stream get` and nats.go (message get, direct get). Nothing is
// read: no backup data is written, no payload is returned; the stream is
// unchanged.
func TestAttackStreamBackupAcrossLink(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	stream := platform.StreamName("orders.eu")
	before := a.usState()
	dir := filepath.Join(t.TempDir(), "backup")
	a.denied("nats stream backup", "--js-domain", "eu", "stream", "backup", stream, dir, "--no-progress")
	// The command that replaces it in the CLI.
	a.denied("nats backup stream", "--js-domain", "eu", "backup", "stream", stream, filepath.Join(dir, "new"))
	var size int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	if size > 0 {
		t.Fatalf("backup from us wrote %d bytes", size)
	}
	a.denied("nats stream get", "--js-domain", "eu", "stream", "get", stream, "1")
	if s, err := a.jsUSeu.Stream(ctx, stream); err == nil {
		if m, err := s.GetMsg(ctx, 1); err == nil {
			t.Fatalf("message get from us returned %q", m.Data)
		}
		if m, err := s.GetLastMsgForSubject(ctx, "orders.eu.>"); err == nil {
			t.Fatalf("last message get from us returned %q", m.Data)
		}
	}
	if m, err := a.usNC.Request("$JS.eu.API.DIRECT.GET."+stream, []byte(`{"seq":1}`), time.Second); err == nil && strings.Contains(string(m.Data), "4111") {
		t.Fatalf("direct get from us returned %q", m.Data)
	}
	if n := a.msgs(a.jsEU, stream); n != 5 {
		t.Fatalf("orders.eu holds %d events, want 5", n)
	}
	a.unchangedUS(before)
	attack.Refused(t, "stream-backup-across-link")
}

// TestAttackResidentBucketsAcrossLink: a KV bucket and an object store
// created in eu with platform.residency eu. From us: a KV get and an
// object get through the domain (nats.go and nats kv get), a KV mirror
// into us, and a core subscription on the bucket's subjects. Nothing is
// read or copied; us is unchanged; the report lists both buckets.
func TestAttackResidentBucketsAcrossLink(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	res := map[string]string{"platform.residency": "eu"}
	kv, err := a.jsEU.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions", Replicas: 1, Metadata: res})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := a.jsEU.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "scans", Replicas: 1, Metadata: res})
	if err != nil {
		t.Fatal(err)
	}
	crossed := a.listen("$KV.sessions.>")
	if _, err := kv.Put(ctx, "card", []byte("4111-1111")); err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, "passport", []byte("4111-scan")); err != nil {
		t.Fatal(err)
	}
	if rkv, err := a.jsUSeu.KeyValue(ctx, "sessions"); err == nil {
		if e, err := rkv.Get(ctx, "card"); err == nil {
			t.Fatalf("kv get from us returned %q", e.Value())
		}
	}
	a.denied("nats kv get sessions", "--js-domain", "eu", "kv", "get", "sessions", "card")
	if ros, err := a.jsUSeu.ObjectStore(ctx, "scans"); err == nil {
		if b, err := ros.GetBytes(ctx, "passport"); err == nil {
			t.Fatalf("object get from us returned %q", b)
		}
	}
	// The same bucket made with the nats CLI.
	if out, err := a.cli(a.euURL, "kv", "add", "cards", "--replicas", "1", "--metadata", "platform.residency=eu"); err != nil {
		t.Fatalf("nats kv add cards --metadata platform.residency=eu: %v\n%s", err, out)
	}
	if out, err := a.cli(a.euURL, "kv", "put", "cards", "k", "4111-3333"); err != nil {
		t.Fatalf("nats kv put in eu: %v\n%s", err, out)
	}
	before := a.usState()
	a.denied("nats kv get cards", "--js-domain", "eu", "kv", "get", "cards", "k")
	_, err = a.jsUS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions_copy", Replicas: 1, Mirror: &jetstream.StreamSource{Name: "sessions", Domain: "eu"}})
	refusedByResidency(t, "kv mirror of sessions in us", err, "kv bucket sessions is resident in eu")
	if _, err := kv.Put(ctx, "card", []byte("4111-2222")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := crossed.Load(); n != 0 {
		t.Fatalf("%d kv updates received in us", n)
	}
	a.unchangedUS(before)
	var rep region.Report
	if err := control.Call(ctx, a.nc, region.SubjReport, nil, &rep); err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, tr := range rep.Topics {
		found[tr.Kind+":"+tr.Topic] = tr.Residency + "@" + tr.Region
	}
	if found["kv:sessions"] != "eu@eu" || found["kv:cards"] != "eu@eu" || found["object:scans"] != "eu@eu" {
		t.Fatalf("residency report lacks the resident buckets: %v", found)
	}
	attack.Refused(t, "resident-buckets-across-link")
}

// TestAttackRedriveResidentDLQIntoMirroredTopic: dead letters of the
// resident orders.eu redriven into orders, a topic mirrored to us. The
// request is refused naming the residency; nothing is stored, orders and
// its mirror in us receive nothing, the DLQ keeps its entries. A redrive
// to the entries' own (resident) topic is still accepted.
func TestAttackRedriveResidentDLQIntoMirroredTopic(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	a.mirrorOrders(ctx)
	redrivetest.DeadLetter(t, a.jsEU, "orders.eu", "fraud", 100, 3, "declined %d")
	dlq := platform.DLQStream("orders.eu")
	depth := a.msgs(a.jsEU, dlq)
	ordersBefore := a.msgs(a.jsEU, platform.StreamName("orders"))
	before := a.usState()
	svc := a.d.Redrive()
	_, err := svc.Submit(ctx, redrive.Request{DLQ: "orders.eu", Selection: redrive.Selection{All: true},
		Destination: platform.TopicSubject("orders", "order:100"), Reason: "attack", Requester: "mallory@platform"})
	if !errors.Is(err, region.ErrResidency) || !strings.Contains(err.Error(), "resident in eu") {
		t.Fatalf("redrive of orders.eu's DLQ into orders: want a residency refusal, got %v", err)
	}
	list, err := svc.List(ctx, redrive.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("refused redrive stored: %+v", list)
	}
	time.Sleep(time.Second)
	if n := a.msgs(a.jsEU, platform.StreamName("orders")); n != ordersBefore {
		t.Fatalf("orders holds %d events, had %d", n, ordersBefore)
	}
	if n := a.msgs(a.jsEU, dlq); n != depth {
		t.Fatalf("DLQ holds %d entries, had %d", n, depth)
	}
	a.unchangedUS(before)
	if _, err := svc.Submit(ctx, redrive.Request{DLQ: "orders.eu", Selection: redrive.Selection{All: true}, Reason: "legit", Requester: "ops@platform"}); err != nil {
		t.Fatalf("redrive of orders.eu's DLQ into orders.eu: %v", err)
	}
	attack.Refused(t, "redrive-resident-dlq-into-mirrored-topic")
}

// TestAttackResidencyStripThenMirror: a region admin edits the resident
// orders.eu's stream to drop (or change to us) its platform.residency
// metadata, then mirrors it into us. Each update is refused; the stream
// keeps its residency; the mirror is refused; us is unchanged.
func TestAttackResidencyStripThenMirror(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	stream := platform.StreamName("orders.eu")
	s, err := a.jsEU.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	before := a.usState()
	for _, res := range []string{"", "us"} {
		cfg := s.CachedInfo().Config
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if res == "" {
			delete(cfg.Metadata, "platform.residency")
		} else {
			cfg.Metadata["platform.residency"] = res
		}
		_, err := a.jsEU.UpdateStream(ctx, cfg)
		refusedByResidency(t, fmt.Sprintf("update setting residency %q", res), err, "may not drop or change its platform.residency")
	}
	if s, err := a.jsEU.Stream(ctx, stream); err != nil || s.CachedInfo().Config.Metadata["platform.residency"] != "eu" {
		t.Fatalf("orders.eu after the refused updates: %v", err)
	}
	_, err = a.jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "stolen", Replicas: 1, Mirror: &jetstream.StreamSource{Name: stream, Domain: "eu"}})
	refusedByResidency(t, "mirror of orders.eu in us", err, "topic orders.eu is resident in eu")
	a.unchangedUS(before)
	attack.Refused(t, "residency-strip-then-mirror")
}

// TestAttackCopyIntoStreamMirroredAbroad: the order reversed. A mirror is
// made in us first of a stream eu does not have yet (nothing to carry:
// allowed), then that stream is created in eu as a copy of orders.eu; and
// the non-resident orders, mirrored to us, is edited to source orders.eu.
// Both are refused naming the mirror in us; us's streams and counts are
// unchanged, orders keeps no source.
func TestAttackCopyIntoStreamMirroredAbroad(t *testing.T) {
	a := newResidencyAttack(t)
	ctx := a.ctx(60 * time.Second)
	a.mirrorOrders(ctx)
	if _, err := a.jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "trap", Replicas: 1, Mirror: &jetstream.StreamSource{Name: "future", Domain: "eu"}}); err != nil {
		t.Fatalf("mirror in us of a stream eu lacks: %v", err)
	}
	before := a.usState()
	_, err := a.jsEU.CreateStream(ctx, jetstream.StreamConfig{Name: "future", Replicas: 1, Sources: []*jetstream.StreamSource{{Name: platform.StreamName("orders.eu")}}})
	refusedByResidency(t, "copy of orders.eu into a stream mirrored to us", err, "stream trap in region us is a mirror of future")
	if _, err := a.jsEU.Stream(ctx, "future"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("refused stream future exists in eu: %v", err)
	}
	s, err := a.jsEU.Stream(ctx, platform.StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sources = []*jetstream.StreamSource{{Name: platform.StreamName("orders.eu")}}
	_, err = a.jsEU.UpdateStream(ctx, cfg)
	refusedByResidency(t, "orders (mirrored to us) sourcing orders.eu", err, "is a mirror of orders")
	time.Sleep(time.Second)
	if s, err := a.jsEU.Stream(ctx, cfg.Name); err != nil || len(s.CachedInfo().Config.Sources) != 0 {
		t.Fatalf("orders after the refused update: %v", err)
	}
	a.unchangedUS(before)
	attack.Refused(t, "copy-into-stream-mirrored-abroad")
}
