package schema

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func fullAccepts(t *testing.T, sch *jsonschema.Schema, payload []byte) bool {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	return err == nil && sch.Validate(doc) == nil
}

func compileBoth(t *testing.T, text string) (*jsonschema.Schema, *fastSchema) {
	t.Helper()
	canon, _, _, err := canonical([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	full, err := compile(canon)
	if err != nil {
		t.Fatal(err)
	}
	return full, compileFast(canon)
}

// The fast path never accepts what the full validator refuses, and it
// does accept the ordinary valid events (so it is the path taken).
func TestFastPathAgreesWithFullValidator(t *testing.T) {
	cases := []struct {
		schema string
		fast   bool // has a fast path
		yes    []string
		no     []string
	}{
		{benchSchema, true,
			[]string{string(benchPayload(300)), `{"orderId":"a","customerId":"b","total":0.5,"currency":"USD","items":[]}`,
				`{"orderId":"a","customerId":"b","total":1e2,"currency":"USD","items":[{"sku":"s","qty":7}]}`},
			[]string{`{"orderId":"a"}`, `{"orderId":1,"customerId":"b","total":1,"currency":"USD","items":[]}`,
				`{"orderId":"a","customerId":"b","total":-1,"currency":"USD","items":[]}`,
				`{"orderId":"a","customerId":"b","total":1,"currency":"GBP","items":[]}`,
				`{"orderId":"a","customerId":"b","total":1,"currency":"USD","items":[{"sku":"s","qty":0}]}`,
				`{"orderId":"a","customerId":"b","total":1,"currency":"USD","items":[],"extra":1}`,
				`{"orderId":"a","customerId":"b","total":1,"currency":"USD","items":[]} x`, `{"orderId":"a",}`, `[]`, ``}},
		{`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":10},"s":{"type":"string","minLength":2,"maxLength":3},"e":{"enum":["a\u00e9",true,null]}},"additionalProperties":{"type":"number"}}`, true,
			[]string{`{"n":1}`, `{"n":10}`, `{"s":"ab"}`, `{"s":"h\u00e9l"}`, `{"e":true}`, `{"e":null}`, `{"x":1.5}`, `{"e":"a\u00e9"}`, `{"n":1.0}`, `{"s":"a\u00e9"}`},
			[]string{`{"n":0}`, `{"n":11}`, `{"n":1.5}`, `{"s":"a"}`, `{"s":"abcd"}`, `{"e":false}`, `{"e":"b"}`, `{"x":"y"}`, `{"n":1e400}`}},
		{`{"type":["string","null"],"maxLength":1}`, true, []string{`"a"`, `null`, `"\u00e9"`}, []string{`"ab"`, `1`, `{}`, `"\u0061\u0062"`}},
		{`{"type":"object","properties":{"a":{"pattern":"^x"}}}`, false, nil, nil},
		{`{"$ref":"#/$defs/x","$defs":{"x":{"type":"string"}}}`, false, nil, nil},
	}
	for _, c := range cases {
		full, fast := compileBoth(t, c.schema)
		if (fast != nil) != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.schema, fast != nil, c.fast)
			continue
		}
		for _, p := range c.yes {
			if !fullAccepts(t, full, []byte(p)) {
				t.Errorf("%s: full validator refuses %s (bad fixture)", c.schema, p)
			}
		}
		for _, p := range c.no {
			if fullAccepts(t, full, []byte(p)) {
				t.Errorf("%s: full validator accepts %s (bad fixture)", c.schema, p)
			}
			if fast != nil && fast.accepts([]byte(p)) {
				t.Errorf("%s: fast path accepts %s, the full validator refuses it", c.schema, p)
			}
		}
	}
	// The bench event takes the fast path.
	_, fast := compileBoth(t, benchSchema)
	if !fast.accepts(benchPayload(1024)) {
		t.Error("the bench payload does not take the fast path")
	}
}

// Random single-byte mutations of valid events: whatever the fast path
// accepts, the full validator accepts too.
func TestFastPathNeverAcceptsMore(t *testing.T) {
	full, fast := compileBoth(t, benchSchema)
	base := benchPayload(200)
	alphabet := []byte(`{}[]":,.-+eE0123456789 \tabcxnulltruefalse\u00e9`)
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 20000 {
		p := append([]byte(nil), base...)
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(p))
			switch rng.IntN(3) {
			case 0:
				p[i] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				p = append(p[:i], p[i+1:]...)
			default:
				p = append(p[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, p[i:]...)...)
			}
		}
		if fast.accepts(p) {
			accepted++
			if !fullAccepts(t, full, p) {
				t.Fatalf("fast path accepts %s, the full validator refuses it", p)
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no mutation was accepted: the test exercises nothing")
	}
	t.Logf("%d of 20000 mutations accepted by both", accepted)
}
