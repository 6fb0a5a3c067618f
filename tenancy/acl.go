package tenancy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/msgplatform/platform/platform"
)

// Inside a tenant's account a topic or queue NAME is stored in the
// stream of the object StoredName(NAME) ("stored.NAME", stream
// "stored_NAME"), while clients publish to the object's own subjects
// (NAME.<key> for a topic, NAME.> for a queue). Those subjects are read
// only by the platform's ingest, which stamps the tenant, applies the
// rate quota and republishes to the stored subject. Tenant users may
// never publish to stored subjects, so every publish passes the ingest.
const storedPrefix = "stored"

// StoredName is the platform object (topic or queue) that holds a
// tenant's object name inside the tenant's account.
func StoredName(name string) string { return storedPrefix + "." + name }

// StreamName is the JetStream stream holding a tenant's topic or queue
// inside the tenant's account; consumers read from it.
func StreamName(name string) string { return platform.StreamName(StoredName(name)) }

// InboxPrefix is the only inbox prefix a tenant user may subscribe to, so
// one user cannot read the replies (and pulled events) of another. Set
// it with nats.CustomInboxPrefix, or `nats --inbox-prefix`.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// permissions derives a user's permissions from the names it may publish
// to and read. Everything not listed is denied (allow lists only).
func permissions(t *Tenant, u UserSpec) (jwt.Permissions, error) {
	var pub, sub []string
	sub = append(sub, InboxPrefix(u.Name)+".>")
	pub = append(pub, "$JS.API.INFO")
	for _, n := range u.Pub {
		switch {
		case t.Topics[n] > 0:
			pub = append(pub, n+".*")
		case t.Queues[n]:
			pub = append(pub, n+".>")
		case t.Groups[n] != "":
			return jwt.Permissions{}, fmt.Errorf("%w: --pub %s: %s is a group, which is read, not published to; publish to its topic %s", ErrInvalid, n, n, t.Groups[n])
		default:
			return jwt.Permissions{}, fmt.Errorf("%w: --pub %s: tenant %s has no topic or queue %q", ErrNotFound, n, t.Name, n)
		}
	}
	for _, n := range u.Sub {
		if strings.Contains(n, "/") { // a topic another tenant shares
			sh, ok := importOf(t, n)
			if !ok {
				return jwt.Permissions{}, fmt.Errorf("%w: --sub %s: no topic shared with tenant %s as %q (platformctl tenant shares lists them)", ErrNotFound, n, t.Name, n)
			}
			sub = append(sub, SharedSubject(sh.From, sh.Topic))
			continue
		}
		switch {
		case t.Topics[n] > 0:
			// Reading a topic is reading its events by sequence or
			// subject (stream get, direct get), and describing it. Its
			// consumers are the platform's: a user creates, deletes or
			// resets none (a group, granted with --sub GROUP, is how a
			// team consumes a topic).
			s := StreamName(n)
			pub = append(pub,
				"$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s,
				"$JS.API.CONSUMER.LIST."+s, "$JS.API.CONSUMER.NAMES."+s,
				GateSubject("$JS.API.DIRECT.GET.", s), GateSubject("$JS.API.DIRECT.GET.", s+".>"))
		case t.Queues[n]:
			pub = append(pub, consumerPerms(StreamName(n), platform.QueueConsumer)...)
		case t.Groups[n] != "":
			topic := t.Groups[n]
			for p := range t.Topics[topic] {
				pub = append(pub, consumerPerms(StreamName(topic), platform.PartitionConsumer(n, p))...)
			}
		default:
			return jwt.Permissions{}, fmt.Errorf("%w: --sub %s: tenant %s has no topic, queue or group %q", ErrNotFound, n, t.Name, n)
		}
	}
	slices.Sort(pub)
	return jwt.Permissions{
		Pub: jwt.Permission{Allow: slices.Compact(pub)},
		Sub: jwt.Permission{Allow: sub},
	}, nil
}

// consumerPerms lets a user pull from and ack one durable consumer, the
// platform's: pulls and acks as the gate subjects their JetStream
// subjects are mapped to (gate.go), so every delivery they cause goes to
// an inbox.
func consumerPerms(stream, consumer string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.INFO." + stream + "." + consumer,
		GateSubject("$JS.API.CONSUMER.MSG.NEXT.", stream+"."+consumer),
		GateSubject("$JS.ACK.", stream+"."+consumer+".>"),
	}
}
