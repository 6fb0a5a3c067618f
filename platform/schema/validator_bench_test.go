package schema

import (
	"strings"
	"testing"

	"github.com/msgplatform/platform/platform"
)

// benchSchema and benchPayload mirror `platformctl bench publish
// --validate` (an OrderPlaced padded to 1 KiB).
const benchSchema = `{"type":"object","additionalProperties":false,
 "required":["orderId","customerId","total","currency","items"],
 "properties":{"orderId":{"type":"string"},"customerId":{"type":"string"},"total":{"type":"number","minimum":0},
  "currency":{"enum":["EUR","USD"]},"pad":{"type":"string"},
  "items":{"type":"array","items":{"type":"object","required":["sku","qty"],
   "properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1},"price":{"type":"number"}}}}}}`

func benchPayload(size int) []byte {
	base := `{"orderId":"o-00042","customerId":"c-7","total":129.5,"currency":"EUR","items":[{"sku":"sku-1","qty":2,"price":19.5},{"sku":"sku-2","qty":1,"price":90.5}],"pad":""}`
	if pad := size - len(base); pad > 0 {
		return []byte(base[:len(base)-2] + strings.Repeat("x", pad) + `"}`)
	}
	return []byte(base)
}

// offlineValidator is a Validator over in-memory subjects (no registry).
func offlineValidator(tb testing.TB, subject, text string, topics map[string]string) *Validator {
	tb.Helper()
	canon, _, fp, err := canonical([]byte(text))
	if err != nil {
		tb.Fatal(err)
	}
	v := (&Registry{}).NewValidator(topics)
	v.subjects[subject] = &Subject{Subject: subject, Mode: ModeNone, Versions: []Version{{Subject: subject, Version: 1, Schema: canon, Fingerprint: fp}}}
	return v
}

func BenchmarkValidate(b *testing.B) {
	v := offlineValidator(b, "BenchOrderPlaced", benchSchema, map[string]string{"orders": "BenchOrderPlaced"})
	ev := &platform.Event{Payload: benchPayload(1024)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Validate("orders", ev); err != nil {
			b.Fatal(err)
		}
	}
}
