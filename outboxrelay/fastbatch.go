package outboxrelay

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Fast batches: a backlog is published as nats-server fast-ingest batches
// (nats-server 2.14+, stream config allow_batched, which platform topics
// set): the same messages, acknowledged once per flow window instead of
// once each. Gap mode "fail" makes what a stream stored of a batch always a
// prefix, so every publish of a batch gets exactly one outcome:
//
//   - stored (flow ack or final count): ok, duplicates included;
//   - not stored (after the stored prefix, or the whole batch when the
//     stream refuses batches): retried at once by a single publish, whose
//     ack or error is exact;
//   - no word for AckTimeout: unknown, retried by a single publish with
//     the same Nats-Msg-Id.
//
// Per-key order needs nothing from the batch: a key still has at most one
// publish in flight, batched or not. Only a backlog is batched (at least
// batchMin heads ready at once; closed after batchIdle without additions):
// steady traffic, a term's first read and every retry go by single
// publishes. Details: docs/design/outbox-fast-batches.md.

const (
	batchMin  = 32
	batchIdle = 2 * time.Millisecond
	// batchRefusedFor is how long a topic whose stream refused a batch
	// (allow_batched off: a stream not made by the platform, or an older
	// server) is published by single publishes before batches are tried
	// again.
	batchRefusedFor = time.Minute
	// errBatchDisabled is nats-server's JSBatchPublishDisabledErr.
	errBatchDisabled = 10205
)

// batcher holds the relay's open fast batches, all answered on one
// wildcard subscription.
type batcher struct {
	r      *Relay
	prefix string // <inbox>.
	flow   uint16

	mu      sync.Mutex
	sub     *nats.Subscription
	byID    map[string]*fbatch
	open    map[batchKey]*fbatch // the batch taking new publishes, per pipeline and topic
	refused map[string]time.Time // topic -> batches refused until
}

type batchKey struct {
	to    chan<- ackResult
	topic string
}

// fbatch is one fast batch. items[i] has batch sequence done+1+i.
type fbatch struct {
	key          batchKey
	id           string
	reply        string // <inbox>.<id>.<flow>.fail.
	subject      string // of the last message (the end-of-batch goes there)
	sent         uint64
	done         uint64
	items        []pubItem
	closing      bool // end-of-batch sent
	lastAdd      time.Time
	lastProgress time.Time
}

func newBatcher(r *Relay) *batcher {
	return &batcher{
		r:       r,
		flow:    uint16(min(max(r.cfg.MaxInFlight/8, 1), 500)),
		byID:    map[string]*fbatch{},
		open:    map[batchKey]*fbatch{},
		refused: map[string]time.Time{},
	}
}

// subscribe makes sure the reply subscription exists. It is made on first
// use, not in New (which does not touch the broker); nats.go restores it
// after a reconnect.
func (b *batcher) subscribe() bool {
	if b.sub != nil {
		return true
	}
	inbox := b.r.nc.NewInbox()
	sub, err := b.r.nc.Subscribe(inbox+".>", b.handle)
	if err != nil {
		return false
	}
	_ = sub.SetPendingLimits(-1, -1) // bounded by MaxInFlight publishes
	b.sub, b.prefix = sub, inbox+"."
	return true
}

// add publishes k's head in the open batch of its topic, opening one if
// backlog records (this one included) are read and not yet published. It
// reports false, having published nothing and left msg as it was, when
// the head should go by a single publish.
func (b *batcher) add(k *keyState, msg *nats.Msg, rec Record, topic string, backlog int, acks chan<- ackResult) bool {
	now := time.Now()
	key := batchKey{to: acks, topic: topic}
	b.mu.Lock()
	defer b.mu.Unlock()
	fb := b.open[key]
	if fb == nil {
		if backlog < batchMin || now.Before(b.refused[topic]) || !b.subscribe() {
			return false
		}
		for _, other := range b.byID {
			if other.key == key { // the previous one still closing: a second batch on a stream starts at one ack per message
				return false
			}
		}
		id := nuid.Next()
		fb = &fbatch{key: key, id: id, reply: b.prefix + id + "." + strconv.Itoa(int(b.flow)) + ".fail.", lastProgress: now}
		b.byID[id] = fb
		b.open[key] = fb
	}
	seq := fb.sent + 1
	op := "1"
	if seq == 1 {
		op = "0"
	}
	msg.Reply = fb.reply + strconv.FormatUint(seq, 10) + "." + op + ".$FI"
	if err := b.r.nc.PublishMsg(msg); err != nil {
		msg.Reply = ""
		if fb.sent == 0 {
			b.drop(fb)
		}
		return false
	}
	fb.sent = seq
	fb.subject = msg.Subject
	fb.lastAdd = now
	fb.items = append(fb.items, pubItem{k: k, rec: rec, sent: now, to: acks})
	return true
}

// tick ends the batches of acks's pipeline that are idle (an end-of-batch
// commit, whose PubAck settles the tail) or have heard nothing for
// AckTimeout (their publishes are unknown and retried). It returns when it
// wants to run again (zero: nothing open).
//
// A pipeline whose window is full (blocked) adds nothing until acks come,
// and they do: its window holds more than a flow window of the batch, or
// other publishes. So a batch is idle only while its pipeline has room
// and nothing to add, the end of a backlog: closing it earlier would
// leave the publishes of the next few milliseconds to single publishes
// (a second batch on a stream starts at one ack per message, so none is
// opened while one is closing).
func (b *batcher) tick(now time.Time, acks chan<- ackResult, blocked bool) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, fb := range b.byID {
		if fb.key.to != acks {
			continue
		}
		if deadline := fb.lastProgress.Add(b.r.cfg.AckTimeout); len(fb.items) > 0 && !now.Before(deadline) {
			b.finish(fb, fb.done, OutcomeUnknown)
			continue
		}
		if len(fb.items) > 0 {
			soonest(fb.lastProgress.Add(b.r.cfg.AckTimeout))
		}
		if fb.closing || blocked {
			continue
		}
		if idle := fb.lastAdd.Add(batchIdle); now.Before(idle) {
			soonest(idle)
			continue
		}
		delete(b.open, fb.key)
		fb.closing = true
		eob := &nats.Msg{Subject: fb.subject, Reply: fb.reply + strconv.FormatUint(fb.sent+1, 10) + ".3.$FI"}
		if err := b.r.nc.PublishMsg(eob); err != nil {
			b.finish(fb, fb.done, OutcomeUnknown)
			continue
		}
		if len(fb.items) == 0 {
			b.drop(fb) // nothing to hear about; the PubAck is ignored
		}
	}
	return next
}

// forget drops the batches of a pipeline that ended: what they report
// later is ignored (their records stay unmarked and are republished).
func (b *batcher) forget(acks chan<- ackResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fb := range b.byID {
		if fb.key.to == acks {
			b.drop(fb)
		}
	}
}

func (b *batcher) drop(fb *fbatch) {
	delete(b.byID, fb.id)
	if b.open[fb.key] == fb {
		delete(b.open, fb.key)
	}
}

// settle reports the items stored through batch sequence n as ok.
func (b *batcher) settle(fb *fbatch, n uint64) {
	if n <= fb.done {
		return
	}
	n = min(n, fb.sent)
	now := time.Now()
	cnt := int(n - fb.done)
	for _, it := range fb.items[:cnt] {
		b.r.m.countBatch(true)
		it.to <- ackResult{k: it.k, rec: it.rec, ack: Ack{Latency: now.Sub(it.sent)}, out: OutcomeOK}
	}
	clear(fb.items[:cnt])
	fb.items = fb.items[cnt:]
	fb.done = n
	fb.lastProgress = now
}

// finish ends fb: stored through n, the rest retried by single publishes
// (counted under out when it is not empty: the outcome was unknown).
func (b *batcher) finish(fb *fbatch, n uint64, out string) {
	b.settle(fb, n)
	for _, it := range fb.items {
		b.r.m.countBatch(false)
		it.to <- ackResult{k: it.k, rec: it.rec, retry: true, out: out}
	}
	fb.items = nil
	b.drop(fb)
}

// batchReply is every shape the stream answers a batch message with: a
// flow message ({"type":"ack"|"gap"|"err",...}), the final PubAck
// ({"stream","seq","batch","count"}) or an error ({"error":{...}}).
type batchReply struct {
	Type  string `json:"type"`
	Seq   uint64 `json:"seq"`
	Batch string `json:"batch"`
	Count uint64 `json:"count"`
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// handle takes the stream's answers, on the connection's goroutine.
func (b *batcher) handle(m *nats.Msg) {
	// <inbox>.<id>.<flow>.fail.<seq>.<op>.$FI
	rest, ok := strings.CutPrefix(m.Subject, b.prefix)
	if !ok {
		return
	}
	id, _, _ := strings.Cut(rest, ".")
	var rep batchReply
	noStream := len(m.Data) == 0 && m.Header.Get("Status") == "503" // no responders: no stream takes the subject
	if !noStream && (len(m.Data) == 0 || json.Unmarshal(m.Data, &rep) != nil) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fb := b.byID[id]
	if fb == nil {
		return
	}
	switch {
	case noStream:
		b.finish(fb, fb.done, "")
	case rep.Type == "ack":
		b.settle(fb, rep.Seq)
	case rep.Type == "gap" || rep.Type == "err":
		// The batch ends; its PubAck (or the end-of-batch's) says how far
		// it got. Until then its publishes wait.
		fb.lastProgress = time.Now()
		if b.open[fb.key] == fb {
			delete(b.open, fb.key)
		}
	case rep.Error != nil:
		if rep.Error.ErrCode == errBatchDisabled {
			b.refused[fb.key.topic] = time.Now().Add(batchRefusedFor)
			b.r.log.Info("outboxrelay: the topic's stream does not take fast batches (allow_batched); publishing one by one", "topic", fb.key.topic)
		}
		// Refused outright (batches disabled, the batch unknown or ended,
		// its first message refused, or a platform ingest refusing one):
		// what was acked stands, the rest is retried one by one.
		b.finish(fb, fb.done, "")
	case rep.Batch == id:
		b.finish(fb, rep.Count, "")
	}
}
