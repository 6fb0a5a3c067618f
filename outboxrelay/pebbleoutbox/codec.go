package pebbleoutbox

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/msgplatform/platform/outboxrelay"
)

var errCorrupt = errors.New("pebbleoutbox: corrupt record")

// encode: varint created (unix ns), then length-prefixed id, topic, key,
// header count and each name, value count and values; the payload is the
// rest.
func encode(ev *outboxrelay.Event) []byte {
	n := 32 + len(ev.ID) + len(ev.Topic) + len(ev.Key) + len(ev.Payload)
	b := make([]byte, 0, n)
	b = binary.AppendVarint(b, ev.CreatedAt.UnixNano())
	b = appendString(b, ev.ID)
	b = appendString(b, ev.Topic)
	b = appendString(b, ev.Key)
	b = binary.AppendUvarint(b, uint64(len(ev.Headers)))
	for k, vs := range ev.Headers {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, ev.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decode(b []byte, ev *outboxrelay.Event) error {
	d := decoder{b: b}
	ev.CreatedAt = time.Unix(0, d.varint())
	ev.ID, ev.Topic, ev.Key = d.str(), d.str(), d.str()
	nh := d.uvarint()
	if nh > 0 && d.err == nil {
		ev.Headers = make(map[string][]string, min(nh, 64))
		for i := uint64(0); i < nh && d.err == nil; i++ {
			k := d.str()
			nv := d.uvarint()
			for j := uint64(0); j < nv && d.err == nil; j++ {
				ev.Headers[k] = append(ev.Headers[k], d.str())
			}
		}
	}
	if d.err != nil {
		return d.err
	}
	ev.Payload = append([]byte{}, d.b...)
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) varint() int64 { return readVarint(d, binary.Varint) }

func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }

// readVarint consumes one varint that read decodes; a missing or
// overlong one sets errCorrupt.
func readVarint[T int64 | uint64](d *decoder, read func([]byte) (T, int)) T {
	v, n := read(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	l := d.uvarint()
	if d.err != nil || l > uint64(len(d.b)) {
		d.err = errCorrupt
		return ""
	}
	s := string(d.b[:l])
	d.b = d.b[l:]
	return s
}
