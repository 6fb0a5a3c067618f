package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// obj builds an object schema: props maps name -> type, req lists required
// names, closed sets additionalProperties: false.
func obj(closed bool, props map[string]string, req ...string) string {
	p := map[string]any{}
	for k, t := range props {
		p[k] = map[string]any{"type": t}
	}
	s := map[string]any{"type": "object", "properties": p}
	if len(req) > 0 {
		s["required"] = req
	}
	if closed {
		s["additionalProperties"] = false
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func check(t *testing.T, mode Mode, versions ...string) []Violation {
	t.Helper()
	var existing []Version
	for i, v := range versions[:len(versions)-1] {
		canon, _, fp, err := canonical([]byte(v))
		if err != nil {
			t.Fatalf("v%d: %v", i+1, err)
		}
		existing = append(existing, Version{Subject: "OrderPlaced", Version: i + 1, Schema: canon, Fingerprint: fp})
	}
	_, doc, _, err := canonical([]byte(versions[len(versions)-1]))
	if err != nil {
		t.Fatalf("candidate: %v", err)
	}
	vs, _, err := compatibility(mode, len(versions), doc, existing)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestCompatibilityMatrix is the matrix: five changes, each under
// backward, forward and full, for both JSON Schema content models. The
// expected outcomes are Confluent's documented JSON Schema semantics
// (backward: every document valid under the old schema is valid under
// the new; forward: the reverse; full: both), which make the content
// model decide additions and removals (doc.go has the table).
func TestCompatibilityMatrix(t *testing.T) {
	base := map[string]string{"orderId": "string", "total": "number", "note": "string"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	// Every change is made to obj(base, required orderId): extra changes
	// base ("" removes a field) and required is what the new schema
	// requires besides orderId.
	type change struct {
		name     string
		extra    map[string]string
		required []string
		// want[model][mode]: true = compatible; rule expected when not.
		open, closed map[Mode]string
	}
	ok := ""
	changes := []change{
		{
			name:   "add optional field",
			extra:  map[string]string{"coupon": "string"},
			open:   map[Mode]string{ModeBackward: RuleOpenModelAdded, ModeForward: ok, ModeFull: RuleOpenModelAdded},
			closed: map[Mode]string{ModeBackward: ok, ModeForward: RuleClosedModelReject, ModeFull: RuleClosedModelReject},
		},
		{
			name:     "add required field",
			extra:    map[string]string{"customerId": "string"},
			required: []string{"customerId"},
			open:     map[Mode]string{ModeBackward: RuleRequiredAdded, ModeForward: ok, ModeFull: RuleRequiredAdded},
			closed:   map[Mode]string{ModeBackward: RuleRequiredAdded, ModeForward: RuleClosedModelReject, ModeFull: RuleRequiredAdded},
		},
		{
			name:   "remove optional field",
			extra:  map[string]string{"note": ""},
			open:   map[Mode]string{ModeBackward: ok, ModeForward: RuleOpenModelAdded, ModeFull: RuleOpenModelAdded},
			closed: map[Mode]string{ModeBackward: RuleClosedModelReject, ModeForward: ok, ModeFull: RuleClosedModelReject},
		},
		{
			name:   "rename field",
			extra:  map[string]string{"note": "", "comment": "string"},
			open:   map[Mode]string{ModeBackward: RuleOpenModelAdded, ModeForward: RuleOpenModelAdded, ModeFull: RuleOpenModelAdded},
			closed: map[Mode]string{ModeBackward: RuleClosedModelReject, ModeForward: RuleClosedModelReject, ModeFull: RuleClosedModelReject},
		},
		{
			name:   "change type",
			extra:  map[string]string{"total": "string"},
			open:   map[Mode]string{ModeBackward: RuleTypeChanged, ModeForward: RuleTypeChanged, ModeFull: RuleTypeChanged},
			closed: map[Mode]string{ModeBackward: RuleTypeChanged, ModeForward: RuleTypeChanged, ModeFull: RuleTypeChanged},
		},
	}
	for _, ch := range changes {
		for _, closed := range []bool{false, true} {
			want, model := ch.open, "open"
			if closed {
				want, model = ch.closed, "closed"
			}
			for _, mode := range []Mode{ModeBackward, ModeForward, ModeFull} {
				t.Run(fmt.Sprintf("%s/%s/%s", ch.name, model, mode), func(t *testing.T) {
					vs := check(t, mode, obj(closed, base, "orderId"), obj(closed, with(ch.extra), append([]string{"orderId"}, ch.required...)...))
					rule := want[mode]
					if rule == ok {
						if len(vs) != 0 {
							t.Fatalf("want compatible, got %v", vs)
						}
						return
					}
					if len(vs) == 0 {
						t.Fatalf("want refused (%s), got compatible", rule)
					}
					found := false
					for _, v := range vs {
						found = found || v.Rule == rule
						if !strings.HasPrefix(v.Message, "backward: ") && !strings.HasPrefix(v.Message, "forward: ") {
							t.Errorf("message does not name its direction: %q", v.Message)
						}
					}
					if !found {
						t.Fatalf("want rule %s among %v", rule, vs)
					}
				})
			}
		}
	}
	// mode none accepts everything.
	if vs := check(t, ModeNone, obj(false, base), obj(false, with(map[string]string{"total": "string"}), "total")); len(vs) != 0 {
		t.Fatalf("mode none refused: %v", vs)
	}
}

// TestGuideRemoveRequiredField is the guide's case: v2 -> v3 removes a
// field old consumers still require. Backward (new readers read old data)
// passes; full refuses it because v2 consumers fail on v3 data.
func TestGuideRemoveRequiredField(t *testing.T) {
	v1 := obj(false, map[string]string{"orderId": "string", "total": "number"}, "orderId")
	v2 := obj(false, map[string]string{"orderId": "string", "total": "number", "customerId": "string"}, "orderId", "customerId")
	v3 := obj(false, map[string]string{"orderId": "string", "total": "number"}, "orderId")
	if vs := check(t, ModeBackward, v1, v2, v3); len(vs) != 0 {
		t.Fatalf("backward refused v3: %v", vs)
	}
	vs := check(t, ModeFull, v1, v2, v3)
	if len(vs) == 0 {
		t.Fatal("full accepted v3")
	}
	want := `forward: field "customerId" is required by v2 but not by v3; consumers on v2 fail on data written with v3 that lacks it`
	if vs[0].Message != want || vs[0].Rule != RuleRequiredAdded {
		t.Fatalf("full: got %+v\nwant %q", vs[0], want)
	}
	// And the other way round: making customerId required again in v3.
	vs = check(t, ModeBackward, v1, v3, v2)
	want = `backward: field "customerId" became required in v3; data written with v2 may lack it`
	if len(vs) == 0 || vs[0].Message != want {
		t.Fatalf("backward, required added: got %v\nwant %q", vs, want)
	}
}

// TestTransitive: a mode only sees the latest version; its _transitive
// form sees all. v2 was registered under none (it dropped orderId's
// requirement and changed total's type); v3 matches v2 but not v1.
func TestTransitive(t *testing.T) {
	v1 := obj(true, map[string]string{"orderId": "string", "total": "number"}, "orderId")
	v2 := obj(true, map[string]string{"orderId": "string", "total": "string"}, "orderId")
	v3 := obj(true, map[string]string{"orderId": "string", "total": "string", "coupon": "string"}, "orderId")
	if vs := check(t, ModeBackward, v1, v2, v3); len(vs) != 0 {
		t.Fatalf("backward (v2 only) refused: %v", vs)
	}
	vs := check(t, ModeBackwardTransitive, v1, v2, v3)
	if len(vs) != 1 || vs[0].Rule != RuleTypeChanged || !strings.Contains(vs[0].Message, "(v1)") {
		t.Fatalf("backward_transitive: want one type change against v1, got %v", vs)
	}
	if vs := check(t, ModeForwardTransitive, v1, v2, v3); len(vs) < 2 {
		t.Fatalf("forward_transitive: want refusals against v2 and v1, got %v", vs)
	}
	if vs := check(t, ModeFullTransitive, v1, v2, v3); len(vs) < 3 {
		t.Fatalf("full_transitive: got %v", vs)
	}
}

// TestPartiallyOpenModel: Confluent's way to add an optional field in full
// mode: the old schema's additionalProperties is a schema, and the new
// field uses exactly it.
func TestPartiallyOpenModel(t *testing.T) {
	v1 := `{"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"],"additionalProperties":{"type":"string"}}`
	v2 := `{"type":"object","properties":{"orderId":{"type":"string"},"coupon":{"type":"string"}},"required":["orderId"],"additionalProperties":{"type":"string"}}`
	if vs := check(t, ModeFull, v1, v2); len(vs) != 0 {
		t.Fatalf("full refused: %v", vs)
	}
	v3 := `{"type":"object","properties":{"orderId":{"type":"string"},"coupon":{"type":"string"},"qty":{"type":"integer"}},"required":["orderId"],"additionalProperties":{"type":"string"}}`
	if vs := check(t, ModeFull, v1, v2, v3); len(vs) == 0 {
		t.Fatal("full accepted an integer field where additionalProperties is string")
	}
}

func TestNestedAndWidening(t *testing.T) {
	v1 := `{"type":"object","properties":{"customer":{"type":"object","properties":{"id":{"type":"string"},"tier":{"enum":["gold","silver"]}},"required":["id"],"additionalProperties":false},"qty":{"type":"integer","minimum":1}}}`
	// integer -> number widens; minimum relaxed; enum grows: backward ok.
	v2 := `{"type":"object","properties":{"customer":{"type":"object","properties":{"id":{"type":"string"},"tier":{"enum":["gold","silver","bronze"]}},"required":["id"],"additionalProperties":false},"qty":{"type":"number","minimum":0}}}`
	if vs := check(t, ModeBackward, v1, v2); len(vs) != 0 {
		t.Fatalf("backward refused: %v", vs)
	}
	vs := check(t, ModeForward, v1, v2)
	got := map[string]string{}
	for _, v := range vs {
		got[v.Path] = v.Rule
	}
	if got["customer.tier"] != RuleEnumNarrowed || got["qty"] != RuleTypeChanged {
		t.Fatalf("forward: %v", vs)
	}
	// A nested required field is found by its path.
	v3 := `{"type":"object","properties":{"customer":{"type":"object","properties":{"id":{"type":"string"},"tier":{"enum":["gold","silver","bronze"]},"email":{"type":"string"}},"required":["id","email"],"additionalProperties":false},"qty":{"type":"number","minimum":0}}}`
	vs = check(t, ModeBackward, v1, v2, v3)
	if len(vs) != 1 || vs[0].Path != "customer.email" || vs[0].Rule != RuleRequiredAdded {
		t.Fatalf("nested required: %v", vs)
	}
	// Combinators are not analysed: they must stay identical.
	o1 := `{"type":"object","properties":{"pay":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`
	o2 := `{"type":"object","properties":{"pay":{"oneOf":[{"type":"string"}]}}}`
	if vs := check(t, ModeBackward, o1, o1); len(vs) != 0 {
		t.Fatalf("identical oneOf refused: %v", vs)
	}
	if vs := check(t, ModeBackward, o1, o2); len(vs) != 1 || vs[0].Rule != RuleOpaque {
		t.Fatalf("changed oneOf: %v", vs)
	}
}

func TestInvalidSchemas(t *testing.T) {
	for _, s := range []string{``, `[1]`, `{"type":`, `{"type":"objekt"}`, `{"$ref":"file:///etc/passwd"}`} {
		if _, _, _, err := canonical([]byte(s)); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
	for _, s := range []string{"", "1abc", "Order.Placed", "a b"} {
		if ValidateSubject(s) == nil {
			t.Errorf("subject %q accepted", s)
		}
	}
	if Mode("sideways").Validate() == nil {
		t.Error("mode sideways accepted")
	}
}
