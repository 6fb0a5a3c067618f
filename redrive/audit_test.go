package redrive

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// benchLikeLinks are n links as one run writes them: contiguous DLQ
// seqs, contiguous stream seqs, a subject per key, an original id each.
func benchLikeLinks(id string, from uint64, n int) []Link {
	ls := make([]Link, n)
	for i := range ls {
		q := from + uint64(i)
		ls[i] = Link{DLQSeq: q, MsgID: MsgID(id, q), OriginalID: fmt.Sprintf("evt-%d", q), OrigStream: "orders", OrigSeq: 1000 + q,
			Subject: fmt.Sprintf("orders.%d.key-%d", q%24, q%1024), Stream: "orders", Seq: 5000 + q}
	}
	return ls
}

func roundTrip(t *testing.T, id string, in []Link) (SentLinks, []byte) {
	t.Helper()
	c, ok := compactLinks(id, in)
	if !ok {
		t.Fatalf("compactLinks refused %+v", in)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeLinks(id, b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\nstored %s", out, in, b)
	}
	// A record read back from the stream (After decoded as any) gives
	// the same links.
	var r AuditRecord
	raw, _ := json.Marshal(AuditRecord{Action: ActionSent, Target: id, After: c})
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Links(); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("Links of the stored record: %v, %+v", err, got)
	}
	return c, b
}

func TestCompactLinksRoundTrip(t *testing.T) {
	t.Parallel()
	const id = "rd-20261129-190839-4f5c60"

	// A run's batch: one range, a fraction of the per-event bytes.
	in := benchLikeLinks(id, 1, 500)
	c, b := roundTrip(t, id, in)
	if len(c.Ranges) != 1 || c.Ranges[0].N != 500 {
		t.Errorf("contiguous batch: %d ranges, want 1 of 500", len(c.Ranges))
	}
	old, _ := json.Marshal(in)
	if per := len(b) / len(in); per > 60 || len(b)*4 > len(old) {
		t.Errorf("compact record %d bytes (%d per event), per-event links %d bytes: want at most 60 per event and 1/4 of the old", len(b), per, len(old))
	}

	// A DLQ as failures fill it: origins far apart, still one range.
	sparse := benchLikeLinks(id, 1, 500)
	for i := range sparse {
		sparse[i].OrigSeq = 1000 + uint64(i*i)
	}
	c, b = roundTrip(t, id, sparse)
	if len(c.Ranges) != 1 || len(c.Ranges[0].OrigSeqs) != 500 || len(b)/len(sparse) > 70 {
		t.Errorf("sparse origins: %d ranges, %d bytes per event", len(c.Ranges), len(b)/len(sparse))
	}

	// A common subject and no original ids are stored once, not per link.
	same := benchLikeLinks(id, 1, 100)
	for i := range same {
		same[i].Subject, same[i].OriginalID = "payments.0.card", ""
	}
	c, _ = roundTrip(t, id, same)
	if r := c.Ranges[0]; len(c.Ranges) != 1 || r.Subject != "payments.0.card" || r.Subjects != nil || r.OriginalIDs != nil {
		t.Errorf("uniform range: %+v", c.Ranges)
	}

	// Every way a range breaks, each between two links.
	mixed := benchLikeLinks(id, 10, 12)
	mixed[2].DLQSeq += 5 // a gap in the DLQ (skipped entries)
	mixed[2].MsgID = MsgID(id, mixed[2].DLQSeq)
	for i := 3; i < 12; i++ {
		mixed[i].DLQSeq = mixed[i-1].DLQSeq + 1
		mixed[i].MsgID = MsgID(id, mixed[i].DLQSeq)
	}
	mixed[4].Seq += 100 // another publisher in between
	for i := 5; i < 12; i++ {
		mixed[i].Seq = mixed[i-1].Seq + 1
	}
	mixed[6].Duplicate = true // a retried run: stored before
	mixed[7].Stream = "orders-eu"
	mixed[8].OrigStream = ""
	mixed[8].OrigSeq = 0 // no origin recorded
	mixed[9].OrigSeq = 77
	mixed[10].OrigSeq = 3 // origins out of order
	mixed[11].OrigSeq = 0
	roundTrip(t, id, mixed)

	// One link, and none.
	roundTrip(t, id, benchLikeLinks(id, 42, 1))
	if c, ok := compactLinks(id, nil); !ok || len(c.Ranges) != 0 {
		t.Errorf("no links: %+v %v", c, ok)
	}
}

// A link whose message id is not derivable is not compacted (the run
// then writes the per-event form).
func TestCompactLinksRefusesForeignMsgID(t *testing.T) {
	t.Parallel()
	for _, foreign := range []string{"something-else", MsgID("rd-a", 3), MsgID("rd-b", 2), MsgID("rd-a", 2) + "0", "redrive:rd-a:"} {
		in := benchLikeLinks("rd-a", 1, 3)
		in[1].MsgID = foreign
		if _, ok := compactLinks("rd-a", in); ok {
			t.Errorf("compactLinks accepted dlq seq 2 with message id %q", foreign)
		}
	}
}

// Records written before the compact form (a JSON array of links) are
// read as they were.
func TestLinksOfPerEventRecords(t *testing.T) {
	t.Parallel()
	in := benchLikeLinks("rd-old", 1, 5)
	b, _ := json.Marshal(AuditRecord{Action: ActionSent, Target: "rd-old", After: in})
	var r AuditRecord
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	got, err := r.Links()
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("old record: %v %+v", err, got)
	}
	if ls, err := (AuditRecord{Action: ActionRun, After: map[string]any{"x": 1}}).Links(); ls != nil || err != nil {
		t.Errorf("links of a run record: %v %v", ls, err)
	}
}

func TestLinksRejectMalformedRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ after, want string }{
		{`{"format":3,"ranges":[]}`, "unknown format 3"},
		{`{"format":2,"ranges":[{"dlq_seq":1,"n":0,"stream":"s","seq":1}]}`, "range 0 is malformed (n=0"},
		{`{"format":2,"ranges":[{"dlq_seq":1,"n":2,"stream":"s","seq":1,"subjects":["a"]}]}`, "range 0 is malformed (n=2, 1 subjects"},
		{`{"format":2,"ranges":[{"dlq_seq":1,"n":1,"stream":"s","seq":1,"original_ids":["a","b"]}]}`, "2 original ids"},
		{`{"format":2,"ranges":[{"dlq_seq":1,"n":2,"stream":"s","seq":1,"orig_seqs":[4]}]}`, "1 orig seqs"},
		{`[{"dlq_seq":"x"}]`, "cannot unmarshal"},
	} {
		_, err := decodeLinks("rd-x", []byte(tc.after))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rd-x") {
			t.Errorf("%s: %v, want an error naming the request and %q", tc.after, err, tc.want)
		}
	}
}

// History reads both encodings from the audit stream as links, and the
// compact record is what is stored.
func TestHistoryReadsOldAndCompactSentRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := natstest.Context(t, 30*time.Second)
	a := NewStreamAuditor(e.js, 1)
	old := benchLikeLinks("rd-h", 1, 300)
	neu := benchLikeLinks("rd-h", 301, 300)
	c, ok := compactLinks("rd-h", neu)
	if !ok {
		t.Fatal("not compacted")
	}
	for _, r := range []AuditRecord{
		{Actor: "i1", Action: ActionSent, Target: "rd-h", After: old, Detail: "old"},
		{Actor: "i1", Action: ActionSent, Target: "rd-h", After: c, Detail: "new"},
		{Actor: "i1", Action: ActionComplete, Target: "rd-h"},
	} {
		if err := a.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A tenant without redrive records: none, and no error.
	if none, err := readHistory(ctx, e.js, "nobody", HistoryFilter{}); err != nil || len(none) != 0 {
		t.Fatalf("history of a tenant without records: %d records, %v; want none", len(none), err)
	}
	hist, err := readHistory(ctx, e.js, "", HistoryFilter{ID: "rd-h"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 {
		t.Fatalf("%d records, want 3", len(hist))
	}
	for i, want := range [][]Link{old, neu} {
		got, ok := hist[i].After.([]Link)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("record %d (%s): After %T, links differ", i, hist[i].Detail, hist[i].After)
		}
	}
	// Stored sizes: the compact record is a fraction of the old one.
	s, err := e.js.Stream(ctx, AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	m1, err1 := s.GetMsg(ctx, hist[0].Seq)
	m2, err2 := s.GetMsg(ctx, hist[1].Seq)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if len(m2.Data)*4 > len(m1.Data) {
		t.Errorf("compact record %d bytes, per-event record %d bytes: want under a quarter", len(m2.Data), len(m1.Data))
	}
	t.Logf("300 links: per-event record %d bytes, compact %d bytes", len(m1.Data), len(m2.Data))
}

// Random batches round-trip exactly, whatever breaks their ranges.
func TestCompactLinksRandomRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(p int) bool { return rng.IntN(100) < p }
	for range 300 {
		n := 1 + rng.IntN(60)
		ls := make([]Link, n)
		dlq, seq, orig := uint64(1+rng.IntN(5)), uint64(1+rng.IntN(5)), uint64(rng.IntN(3))
		for i := range ls {
			if pick(10) {
				dlq += uint64(1 + rng.IntN(3))
			}
			if pick(10) {
				seq += uint64(1 + rng.IntN(3))
			}
			orig += uint64(rng.IntN(3))
			l := Link{DLQSeq: dlq, MsgID: MsgID("rd-r", dlq), Stream: "s", Seq: seq, Subject: "a", OrigStream: "o", OrigSeq: orig}
			if pick(20) {
				l.Stream = "s2"
			}
			if pick(30) {
				l.Subject = fmt.Sprintf("a.%d", rng.IntN(3))
			}
			if pick(30) {
				l.OriginalID = fmt.Sprintf("e%d", rng.IntN(5))
			}
			if pick(10) {
				l.OrigStream, l.OrigSeq = "", 0
			}
			l.Duplicate = pick(10)
			ls[i] = l
			dlq, seq = dlq+1, seq+1
		}
		roundTrip(t, "rd-r", ls)
	}
}
