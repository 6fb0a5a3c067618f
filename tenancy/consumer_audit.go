package tenancy

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Every JetStream request that creates, deletes, resets, pauses or
// unpins a consumer, or deletes or purges a stream, in a tenant's
// account is audited, whoever sent it (a tenant user, the platform, an
// operator): the servers publish an API audit advisory for each request
// in the account where it ran, and the manager holding the tenant's
// ingest lease appends one record per request (action consumer.<verb> or
// stream.<verb>, target <stream>[/<consumer>], the requester as the
// actor, the server's error in the detail).

// auditedAPI maps the JetStream API request prefixes that are audited to
// their audit action.
var auditedAPI = []struct{ prefix, action string }{
	{"$JS.API.CONSUMER.DURABLE.CREATE.", "consumer.create"},
	{"$JS.API.CONSUMER.CREATE.", "consumer.create"},
	{"$JS.API.CONSUMER.DELETE.", "consumer.delete"},
	{"$JS.API.CONSUMER.RESET.", "consumer.reset"},
	{"$JS.API.CONSUMER.PAUSE.", "consumer.pause"},
	{"$JS.API.CONSUMER.UNPIN.", "consumer.unpin"},
	{"$JS.API.STREAM.DELETE.", "stream.delete"},
	{"$JS.API.STREAM.PURGE.", "stream.purge"},
	{"$JS.API.STREAM.MSG.DELETE.", "stream.msg_delete"},
}

// watchAPIAudit subscribes rt's connection to the account's API audit
// advisories. active reports whether this manager records them.
func (m *Manager) watchAPIAudit(tenant string, nc *nats.Conn, active func() bool) (*nats.Subscription, error) {
	return nc.Subscribe("$JS.EVENT.ADVISORY.API", func(msg *nats.Msg) {
		if !active() {
			return
		}
		var a server.JSAPIAudit
		if json.Unmarshal(msg.Data, &a) != nil {
			return
		}
		for _, r := range auditedAPI {
			rest, ok := strings.CutPrefix(a.Subject, r.prefix)
			if !ok {
				continue
			}
			target := strings.Replace(rest, ".", "/", 1)
			if r.prefix == "$JS.API.CONSUMER.CREATE." && !strings.Contains(rest, ".") {
				target = rest + "/(ephemeral)"
			}
			rec := Record{Actor: apiActor(a.Client), Action: r.action, Tenant: tenant, Target: target}
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(a.Response), &resp) == nil && resp.Error != nil {
				rec.Detail = "refused: " + resp.Error.Description
			}
			m.auditAsync(rec)
			return
		}
	})
}

// apiActor names a JetStream request's sender: its user's name (the JWT's
// name), else its public key.
func apiActor(c *server.ClientInfo) string {
	switch {
	case c == nil:
		return "nats-server"
	case c.NameTag != "":
		return "user:" + c.NameTag
	case c.User != "":
		return "nkey:" + c.User
	}
	return "nats-server"
}
