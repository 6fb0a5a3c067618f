package redrive

import (
	"bytes"
	"maps"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform/dlq"
)

// The redriven event of a DLQ entry, built from the entry's header block
// as bytes (no header map on the send path).

// rawEntry is a DLQ entry as read: its header block (with the broker's
// headers) and its payload.
type rawEntry struct {
	hdr, data []byte
}

// rawOf turns an entry read through nats.go into its header block.
func rawOf(m *jetstream.RawStreamMsg) *rawEntry {
	return &rawEntry{hdr: encodeHeader(m.Header), data: m.Data}
}

// encodeHeader writes h as a NATS header block (keys sorted, values in
// order); nil for no header.
func encodeHeader(h nats.Header) []byte {
	if len(h) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(h))
	b := []byte("NATS/1.0\r\n")
	for _, k := range keys {
		for _, v := range h[k] {
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

// headerLines calls fn with each header line's key and value (trimmed),
// in order, until fn returns false; the status line is skipped.
func headerLines(hdr []byte, fn func(line, key, val []byte) bool) {
	i := bytes.Index(hdr, []byte("\r\n"))
	if i < 0 {
		return
	}
	for rest := hdr[i+2:]; len(rest) > 0; {
		j := bytes.Index(rest, []byte("\r\n"))
		if j <= 0 {
			return // the blank line ending the block (or a malformed one)
		}
		line := rest[:j]
		rest = rest[j+2:]
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			continue
		}
		if !fn(line, line[:c], bytes.TrimSpace(line[c+1:])) {
			return
		}
	}
}

// headerValue is the first value of key in hdr ("" if none), as
// nats.Header.Get reads it.
func headerValue(hdr []byte, key string) string {
	var v string
	headerLines(hdr, func(_, k, val []byte) bool {
		if string(k) == key {
			v = string(val)
			return false
		}
		return true
	})
	return v
}

// keepHeader reports whether a DLQ entry's header (its key as read) is
// carried over to the redriven event: not the broker's, the DLQ writer's
// or an earlier redrive's (set afresh).
func keepHeader(k []byte) bool {
	return !bytes.HasPrefix(k, []byte("Nats-")) && !bytes.HasPrefix(k, []byte("Platform-Dlq-")) && !bytes.HasPrefix(k, []byte("Platform-Redrive-")) &&
		string(k) != headerEventID && string(k) != HeaderOriginalMsgID
}

// prepare builds the redriven event of a fetched entry, with its
// Nats-Msg-Id: the entry's header block, line by line, without the
// broker's, the DLQ writer's and an earlier redrive's headers
// (keepHeader), then the redrive's own. It overwrites the entry's header
// block.
func (rn *runner) prepare(f fetched) item {
	if f.e == nil {
		return item{idx: f.idx, seq: f.seq, skip: true, gone: true}
	}
	src := f.e.hdr
	// Only the headers the send needs (not dlq.ParseEntry, not toEntry: no
	// fingerprint, no time parsing on the hot path), in one pass.
	var e Entry
	var seqv, origID, eventID string
	headerLines(src, func(_, k, v []byte) bool {
		switch string(k) {
		case dlq.HeaderSubject:
			if e.Subject == "" {
				e.Subject = string(v)
			}
		case dlq.HeaderGroup:
			if e.Group == "" {
				e.Group = string(v)
			}
		case dlq.HeaderStream:
			if e.Stream == "" {
				e.Stream = string(v)
			}
		case dlq.HeaderSeq:
			if seqv == "" {
				seqv = string(v)
			}
		case HeaderOriginalMsgID:
			if origID == "" {
				origID = string(v)
			}
		case headerEventID:
			if eventID == "" {
				eventID = string(v)
			}
		}
		return true
	})
	e.StreamSeq, _ = strconv.ParseUint(seqv, 10, 64)
	dest := destination(rn.dest, rn.object, rn.kind, e)
	if dest == "" {
		return item{idx: f.idx, seq: f.seq, skip: true}
	}
	orig := origID
	if orig == "" {
		orig = eventID
	}
	seq := strconv.FormatUint(f.seq, 10)
	id := "redrive:" + rn.id + ":" + seq // MsgID(rn.id, f.seq)
	// Built in place over the entry's own block, which nothing reads
	// after this (the kept lines only move left; the entry's block is
	// usually the longer, its DLQ headers dropped): no allocation unless
	// the redrive's headers do not fit.
	var h []byte
	if bytes.HasPrefix(src, []byte("NATS/1.0")) { // else not a block the broker wrote: a copy
		h = src[:0:len(src)]
	}
	h = append(h, "NATS/1.0\r\n"...)
	headerLines(src, func(line, k, _ []byte) bool {
		if keepHeader(k) {
			h = append(append(h, line...), "\r\n"...)
		}
		return true
	})
	set := func(k, v string) {
		h = append(append(append(append(h, k...), ": "...), v...), "\r\n"...)
	}
	set(jetstream.MsgIDHeader, id)
	if orig != "" {
		set(HeaderOriginalMsgID, orig)
	}
	if e.Group != "" {
		set(HeaderForGroup, e.Group)
	}
	h = append(h, "\r\n"...)
	return item{idx: f.idx, seq: f.seq, hdr: h, data: f.e.data,
		link: Link{DLQSeq: f.seq, MsgID: id, OriginalID: orig, OrigStream: e.Stream, OrigSeq: e.StreamSeq, Subject: dest}}
}
