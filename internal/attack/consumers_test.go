package attack_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/tenancy"
)

// consumerState is what an attack on a consumer must leave as it was.
type consumerState struct {
	delivered, ackFloor uint64
	pending             uint64
	ackPending          int
}

func (r *rig) consumer(tenant, object, name string) consumerState {
	r.t.Helper()
	c, err := r.tenantJS(tenant).Consumer(ctxT(r.t), tenancy.StreamName(object), name)
	if err != nil {
		r.t.Fatalf("consumer %s/%s: %v", object, name, err)
	}
	info, err := c.Info(ctxT(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	return consumerState{delivered: info.Delivered.Stream, ackFloor: info.AckFloor.Stream, pending: info.NumPending, ackPending: info.NumAckPending}
}

func (r *rig) streams(tenant string) []string {
	r.t.Helper()
	var names []string
	l := r.tenantJS(tenant).StreamNames(ctxT(r.t))
	for n := range l.Name() {
		names = append(names, n)
	}
	return names
}

// Class 3: inside a tenant, a user does only what its permissions name.
// Two teams share a tenant: orders (team A: a producer, a topic reader
// and a member of group notifier) and payments (team B: group ledger,
// with a backlog and an event held unacked by its member). Every route
// team A's users try against payments, or against consumers at all, is
// refused, and payments' stream, its group's position and the tenant's
// stream list are as they were.
func TestAttackTeamAgainstTeam(t *testing.T) {
	r := newRig(t, 1)
	r.tenant("acme", "orders", "payments")
	r.mustCtl("tenant", "group", "acme", "notifier", "--topic", "orders")
	r.mustCtl("tenant", "group", "acme", "ledger", "--topic", "payments")
	r.mustCtl("tenant", "group", "acme", "tracker", "--topic", "orders")
	prodA := r.user("acme", "prod-a", []string{"orders"}, nil)
	readerA := r.user("acme", "reader-a", nil, []string{"orders"})
	memberA := r.user("acme", "member-a", nil, []string{"notifier"})
	trackerA := r.user("acme", "tracker-a", nil, []string{"tracker"})
	prodB := r.user("acme", "prod-b", []string{"payments"}, nil)
	memberB := r.user("acme", "member-b", nil, []string{"ledger"})

	ordersS, paymentsS := tenancy.StreamName("orders"), tenancy.StreamName("payments")
	notifier, ledger := platform.PartitionConsumer("notifier", 0), platform.PartitionConsumer("ledger", 0)

	pinGroup := func(object, consumer string) string {
		c, err := r.tenantJS("acme").Consumer(ctxT(t), tenancy.StreamName(object), consumer)
		if err != nil || len(c.CachedInfo().Config.PriorityGroups) == 0 {
			t.Fatalf("consumer %s: %v", consumer, err)
		}
		return c.CachedInfo().Config.PriorityGroups[0]
	}
	notifierPG, ledgerPG := pinGroup("orders", notifier), pinGroup("payments", ledger)

	// Team A's events are what a delivery would carry: {"seq":N} resets,
	// empty bodies ack or delete.
	ajs, _ := jetstream.New(r.connect(prodA, "prod-a"))
	for _, body := range []string{`{"seq":1000}`, ``, `+TERM`, `{"seq":1000}`, ``, `x`} {
		for range 4 {
			if _, err := ajs.Publish(ctxT(t), "orders.k", []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	bjs, _ := jetstream.New(r.connect(prodB, "prod-b"))
	for i := range 10 {
		if _, err := bjs.Publish(ctxT(t), "payments.k", []byte(fmt.Sprintf("pay-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Team B's member takes one event and holds it unacked.
	bnc := r.connect(memberB, "member-b")
	bjsm, _ := jetstream.New(bnc)
	bcons, err := bjsm.Consumer(ctxT(t), paymentsS, ledger)
	if err != nil {
		t.Fatalf("team B's member reads its group's consumer: %v", err)
	}
	held, err := bcons.Fetch(1, jetstream.FetchMaxWait(3*time.Second), jetstream.FetchPriorityGroup(ledgerPG))
	if err != nil {
		t.Fatal(err)
	}
	var heldMsg jetstream.Msg
	for m := range held.Messages() {
		heldMsg = m
	}
	if heldMsg == nil {
		t.Fatalf("team B's member got nothing: %v", held.Error())
	}

	snapshot := func() (uint64, consumerState, []string) {
		return r.msgs("acme", "payments"), r.consumer("acme", "payments", ledger), r.streams("acme")
	}
	msgs0, led0, streams0 := snapshot()
	unchanged := func(t *testing.T, route string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // whatever it set off has landed
		msgs, led, streams := snapshot()
		if msgs != msgs0 || led != led0 || strings.Join(streams, ",") != strings.Join(streams0, ",") {
			t.Fatalf("%s changed payments: %d events (was %d), ledger %+v (was %+v), streams %v (was %v)", route, msgs, msgs0, led, led0, streams, streams0)
		}
		attack.Refused(t, route)
	}

	anc := r.connect(memberA, "member-a")
	rnc := r.connect(readerA, "reader-a")
	inbox := tenancy.InboxPrefix("member-a")
	pullA := "$JS.API.CONSUMER.MSG.NEXT." + ordersS + "." + notifier
	pull := func(body string) []byte {
		return []byte(`{"batch":4,"expires":500000000,"group":"` + notifierPG + `"` + body + `}`)
	}
	// The reply subjects a delivery must never reach.
	targets := map[string]string{
		"stream-delete":  "$JS.API.STREAM.DELETE." + paymentsS,
		"stream-purge":   "$JS.API.STREAM.PURGE." + paymentsS,
		"consumer-reset": "$JS.API.CONSUMER.RESET." + paymentsS + "." + ledger,
		"consumer-del":   "$JS.API.CONSUMER.DELETE." + paymentsS + "." + ledger,
		"copy-in":        "stored.payments.0.k",
		"ack-other":      heldMsg.Reply(),
		"ingest":         "payments.k",
		"wildcard-inbox": inbox + ".>",
	}
	for name, reply := range targets {
		t.Run("pull-reply-"+name, func(t *testing.T) {
			for _, body := range [][]byte{pull(""), []byte("garbage"), nil} {
				if err := anc.PublishRequest(pullA, reply, body); err != nil {
					t.Fatal(err)
				}
			}
			_ = anc.Flush()
			unchanged(t, "pull-reply-"+name)
		})
	}
	// A member acks (and asks for more with +NXT) with a reply elsewhere.
	t.Run("ack-reply", func(t *testing.T) {
		sub, _ := anc.SubscribeSync(inbox + ".mine")
		if err := anc.PublishRequest(pullA, inbox+".mine", pull("")); err != nil {
			t.Fatal(err)
		}
		var got []*nats.Msg
		for {
			m, err := sub.NextMsg(2 * time.Second)
			if err != nil || len(m.Data) == 0 && m.Header.Get("Status") != "" {
				break
			}
			got = append(got, m)
		}
		if len(got) == 0 {
			t.Fatal("team A's member cannot pull its own group through the gate")
		}
		for i, m := range got {
			body := []byte("+NXT {\"batch\":2}")
			if i%2 == 1 {
				body = nil
			}
			if err := anc.PublishRequest(m.Reply, targets["stream-delete"], body); err != nil {
				t.Fatal(err)
			}
		}
		_ = anc.Flush()
		unchanged(t, "ack-reply-stream-delete")
	})
	t.Run("direct-get-reply", func(t *testing.T) {
		for _, reply := range []string{targets["stream-delete"], targets["copy-in"], targets["consumer-reset"]} {
			if err := rnc.PublishRequest("$JS.API.DIRECT.GET."+ordersS, reply, []byte(`{"seq":2}`)); err != nil {
				t.Fatal(err)
			}
		}
		_ = rnc.Flush()
		unchanged(t, "direct-get-reply")
	})
	t.Run("forward-subject-direct", func(t *testing.T) {
		err := requestErr(anc, "_PLATFORM.FWD.PULL."+ordersS+"."+notifier, pull(""))
		if err == nil || !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "ermission") && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			t.Logf("forward subject: %v", err)
		}
		_ = anc.PublishRequest("_PLATFORM.FWD.PULL."+ordersS+"."+notifier, targets["stream-delete"], pull(""))
		_ = anc.PublishRequest("_PLATFORM.FWD.ACK."+strings.TrimPrefix(heldMsg.Reply(), "$JS.ACK."), "", nil)
		_ = anc.Flush()
		unchanged(t, "forward-subject-direct")
	})
	t.Run("domain-prefixed-pull", func(t *testing.T) {
		for _, d := range []string{"local", "eu", "us"} {
			_ = anc.PublishRequest("$JS."+d+".API.CONSUMER.MSG.NEXT."+ordersS+"."+notifier, targets["stream-delete"], pull(""))
		}
		_ = anc.Flush()
		unchanged(t, "domain-prefixed-pull")
	})
	// Requests a user's permissions never name: consumer and stream
	// administration, and the other team's group.
	admin := map[string]struct {
		nc      *nats.Conn
		subject string
		body    string
	}{
		"consumer-delete-other-group": {rnc, "$JS.API.CONSUMER.DELETE." + paymentsS + "." + ledger, ""},
		"consumer-delete-own-group":   {anc, "$JS.API.CONSUMER.DELETE." + ordersS + "." + notifier, ""},
		"consumer-reset-direct":       {anc, "$JS.API.CONSUMER.RESET." + paymentsS + "." + ledger, `{"seq":11}`},
		"consumer-reset-own-group":    {anc, "$JS.API.CONSUMER.RESET." + ordersS + "." + notifier, `{"seq":11}`},
		"consumer-pause":              {anc, "$JS.API.CONSUMER.PAUSE." + paymentsS + "." + ledger, `{"pause_until":"2030-01-01T00:00:00Z"}`},
		"consumer-unpin":              {anc, "$JS.API.CONSUMER.UNPIN." + paymentsS + "." + ledger, `{"group":"` + ledgerPG + `"}`},
		"consumer-create-ephemeral":   {rnc, "$JS.API.CONSUMER.CREATE." + paymentsS, `{"stream_name":"` + paymentsS + `","config":{"ack_policy":"none"}}`},
		"consumer-create-push":        {rnc, "$JS.API.CONSUMER.CREATE." + ordersS, `{"stream_name":"` + ordersS + `","config":{"deliver_subject":"$JS.API.STREAM.DELETE.` + paymentsS + `","ack_policy":"none"}}`},
		"consumer-durable-create":     {anc, "$JS.API.CONSUMER.DURABLE.CREATE." + ordersS + ".mine", `{"stream_name":"` + ordersS + `","config":{"durable_name":"mine"}}`},
		"consumer-leader-stepdown":    {anc, "$JS.API.CONSUMER.LEADER.STEPDOWN." + paymentsS + "." + ledger, ""},
		"stream-delete-direct":        {anc, "$JS.API.STREAM.DELETE." + paymentsS, ""},
		"stream-purge-direct":         {rnc, "$JS.API.STREAM.PURGE." + paymentsS, ""},
		"stream-msg-delete":           {rnc, "$JS.API.STREAM.MSG.DELETE." + paymentsS, `{"seq":1}`},
		"pull-other-group":            {anc, "$JS.API.CONSUMER.MSG.NEXT." + paymentsS + "." + ledger, string(pull(""))},
		"ack-other-group":             {anc, heldMsg.Reply(), ""},
		"direct-get-other-topic":      {rnc, "$JS.API.DIRECT.GET." + paymentsS, `{"seq":1}`},
		"publish-stored-subject":      {anc, "stored.payments.0.k", "forged"},
		"api-prefix-consumer-delete":  {anc, tenancy.APIPrefix + "CONSUMER.DELETE." + paymentsS + "." + ledger, ""},
		"api-prefix-pull":             {anc, tenancy.APIPrefix + "CONSUMER.MSG.NEXT." + ordersS + "." + notifier, string(pull(""))},
		"api-prefix-stream-delete":    {rnc, tenancy.APIPrefix + "STREAM.DELETE." + paymentsS, ""},
	}
	for name, a := range admin {
		t.Run(name, func(t *testing.T) {
			if err := requestErr(a.nc, a.subject, []byte(a.body)); err == nil {
				t.Fatalf("%s answered (%s)", a.subject, name)
			}
			unchanged(t, name)
		})
	}
	// The real nats CLI, as team A's users.
	cli := map[string]struct {
		creds, user string
		args        []string
	}{
		"cli-consumer-rm-other-group": {readerA, "reader-a", []string{"consumer", "rm", paymentsS, ledger, "-f"}},
		"cli-consumer-add":            {readerA, "reader-a", []string{"consumer", "add", ordersS, "spy", "--pull", "--defaults"}},
		"cli-stream-rm":               {memberA, "member-a", []string{"stream", "rm", paymentsS, "-f"}},
		"cli-stream-purge":            {memberA, "member-a", []string{"stream", "purge", paymentsS, "-f"}},
		"cli-consumer-next-other":     {memberA, "member-a", []string{"consumer", "next", paymentsS, ledger, "--count", "1"}},
	}
	for name, c := range cli {
		t.Run(name, func(t *testing.T) {
			if out, err := r.natsCLI(c.creds, c.user, c.args...); err == nil {
				t.Fatalf("nats %s succeeded:\n%s", strings.Join(c.args, " "), out)
			}
			unchanged(t, name)
		})
	}
	// What team A may do still works through the gate: its member
	// consumes and acks its own group with nats.go.
	t.Run("own-group-still-works", func(t *testing.T) {
		tracker := platform.PartitionConsumer("tracker", 0)
		js, _ := jetstream.New(r.connect(trackerA, "tracker-a"))
		c, err := js.Consumer(ctxT(t), ordersS, tracker)
		if err != nil {
			t.Fatal(err)
		}
		before := r.consumer("acme", "orders", tracker)
		b, err := c.Fetch(5, jetstream.FetchMaxWait(3*time.Second), jetstream.FetchPriorityGroup(pinGroup("orders", tracker)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			if err := m.DoubleAck(ctxT(t)); err != nil {
				t.Fatalf("double ack through the gate: %v", err)
			}
			n++
		}
		after := r.consumer("acme", "orders", tracker)
		if n != 5 || after.ackFloor <= before.ackFloor {
			t.Fatalf("fetched %d (%v); ack floor %d -> %d", n, b.Error(), before.ackFloor, after.ackFloor)
		}
	})
}

// requestErr sends a request and returns its error: a JetStream API error
// in the answer, a permissions violation, or no answer.
func requestErr(nc *nats.Conn, subject string, body []byte) error {
	m, err := nc.Request(subject, body, time.Second)
	if err != nil {
		return err
	}
	if s := m.Header.Get("Status"); s != "" && s != "100" {
		return fmt.Errorf("status %s %s", s, m.Header.Get("Description"))
	}
	if strings.Contains(string(m.Data), `"error"`) {
		return fmt.Errorf("%s", m.Data)
	}
	return nil
}

// Every consumer create, delete or reset in a tenant's account is
// audited, whoever made it: here the platform (a group declared with
// platformctl) and an operator acting in the account directly.
func TestConsumerChangesAreAudited(t *testing.T) {
	r := newRig(t, 1)
	r.tenant("acme", "orders")
	r.mustCtl("tenant", "group", "acme", "tracker", "--topic", "orders")
	js := r.tenantJS("acme")
	s := tenancy.StreamName("orders")
	if _, err := js.CreateOrUpdateConsumer(ctxT(t), s, jetstream.ConsumerConfig{Durable: "by-hand", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctxT(t), s, "by-hand"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"consumer.create", s + "/" + platform.PartitionConsumer("tracker", 0),
		"consumer.delete", s + "/by-hand",
	}
	var out string
	if !eventually(10*time.Second, func() bool {
		out = r.mustCtl("audit", "--tenant", "acme", "--limit", "500")
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("audit lacks %q:\n%s", want, out)
	}
}
