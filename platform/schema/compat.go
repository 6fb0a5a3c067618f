package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Rules a compatibility check can find broken (Violation.Rule). Each is a
// way a document valid under the writer's schema can be invalid under the
// reader's; doc.go has the table.
const (
	RuleRequiredAdded     = "required-added"       // the reader requires a field the writer does not
	RuleOpenModelAdded    = "open-model-field"     // the reader constrains a field an open writer may carry with any value
	RuleClosedModelReject = "closed-model-field"   // a closed reader rejects a field the writer may carry
	RuleModelClosed       = "content-model-closed" // the reader closes a content model the writer leaves open
	RuleTypeChanged       = "type-changed"         // the writer allows a type the reader does not
	RuleEnumNarrowed      = "enum-narrowed"        // the writer allows a value the reader's enum/const does not
	RuleConstraint        = "constraint-changed"   // a validation keyword (minimum, pattern, ...) the registry cannot prove holds
	RuleOpaque            = "not-structural"       // allOf/anyOf/oneOf/not/$ref/...: must stay identical
)

// Violation is one broken rule, with a sentence saying what breaks.
type Violation struct {
	Rule    string `json:"rule"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// IncompatibleError is a refused registration: every rule it breaks.
type IncompatibleError struct {
	Subject    string      `json:"subject"`
	Version    int         `json:"version"` // the version it would have become
	Mode       Mode        `json:"mode"`
	Violations []Violation `json:"violations"`
}

func (e *IncompatibleError) Error() string {
	msgs := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		msgs[i] = v.Message
	}
	return fmt.Sprintf("schema: %s v%d refused under mode %s: %s", e.Subject, e.Version, e.Mode, strings.Join(msgs, "; and "))
}

// Is makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

// node is the structural view of a JSON Schema the checks work on.
type node struct {
	anyValue   bool            // true, {} or only annotations: every value
	never      bool            // false: no value
	types      map[string]bool // nil: every type
	props      map[string]*node
	required   map[string]bool
	additional *node // nil: open (additionalProperties absent or true)
	items      *node // nil: any items
	enum       []string
	other      map[string]any // other validation keywords
	opaque     []string       // keywords not analysed structurally
	raw        any
}

var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$anchor": true, "title": true, "description": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"format": true,                      // an annotation unless format assertion is on (it is not)
	"$defs":  true, "definitions": true, // only reachable through $ref, which is opaque
}

var opaqueKeywords = map[string]bool{
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "$ref": true, "$dynamicRef": true,
	"if": true, "then": true, "else": true, "patternProperties": true, "propertyNames": true,
	"dependentRequired": true, "dependentSchemas": true, "dependencies": true, "prefixItems": true,
	"unevaluatedProperties": true, "unevaluatedItems": true, "contains": true, "additionalItems": true,
}

func parseNode(v any) *node {
	n := &node{raw: v}
	switch t := v.(type) {
	case bool:
		n.anyValue, n.never = t, !t
		return n
	case map[string]any:
		for k, val := range t {
			switch {
			case annotations[k]:
			case opaqueKeywords[k]:
				n.opaque = append(n.opaque, k)
			case k == "type":
				n.types = map[string]bool{}
				switch tv := val.(type) {
				case string:
					n.types[tv] = true
				case []any:
					for _, x := range tv {
						if s, ok := x.(string); ok {
							n.types[s] = true
						}
					}
				}
			case k == "properties":
				m, _ := val.(map[string]any)
				n.props = map[string]*node{}
				for name, sub := range m {
					n.props[name] = parseNode(sub)
				}
			case k == "required":
				n.required = map[string]bool{}
				arr, _ := val.([]any)
				for _, x := range arr {
					if s, ok := x.(string); ok {
						n.required[s] = true
					}
				}
			case k == "additionalProperties":
				if b, ok := val.(bool); !ok || !b {
					n.additional = parseNode(val)
				}
			case k == "items":
				if _, isArr := val.([]any); isArr {
					n.opaque = append(n.opaque, "items (tuple)")
				} else {
					n.items = parseNode(val)
				}
			case k == "enum":
				arr, _ := val.([]any)
				for _, x := range arr {
					n.enum = append(n.enum, canonJSON(x))
				}
			case k == "const":
				n.enum = []string{canonJSON(val)}
			default:
				if n.other == nil {
					n.other = map[string]any{}
				}
				n.other[k] = val
			}
		}
		sort.Strings(n.opaque)
		n.anyValue = n.types == nil && len(n.props) == 0 && len(n.required) == 0 && n.additional == nil &&
			n.items == nil && n.enum == nil && len(n.other) == 0 && len(n.opaque) == 0
		if n.additional != nil && n.additional.anyValue {
			n.additional = nil
		}
		return n
	}
	n.anyValue = true
	return n
}

func canonJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// direction is one reader/writer pairing of a check.
type direction struct {
	name           string // "backward" or "forward"
	reader, writer int    // versions
	readerIsNew    bool
	violations     []Violation
}

func (d *direction) add(rule, path, format string, args ...any) {
	d.violations = append(d.violations, Violation{Rule: rule, Path: path, Message: d.name + ": " + fmt.Sprintf(format, args...)})
}

// consequence says who breaks, in the direction's terms.
func (d *direction) consequence() string {
	if d.readerIsNew {
		return fmt.Sprintf("data written with v%d may not validate against v%d", d.writer, d.reader)
	}
	return fmt.Sprintf("consumers on v%d may reject data written with v%d", d.reader, d.writer)
}

func field(path string) string {
	if path == "" {
		return "the event"
	}
	return fmt.Sprintf("field %q", path)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func typeNames(t map[string]bool) string {
	if t == nil {
		return "any type"
	}
	return strings.Join(slices.Sorted(maps.Keys(t)), "|")
}

// check records every way a document valid under w can be invalid under
// r: it proves (conservatively) that w's documents are a subset of r's.
func (d *direction) check(w, r *node, path string) {
	if w.never || r.anyValue {
		return
	}
	if len(w.opaque) > 0 || len(r.opaque) > 0 {
		if !reflect.DeepEqual(w.raw, r.raw) {
			kw := append(slices.Clone(w.opaque), r.opaque...)
			slices.Sort(kw)
			d.add(RuleOpaque, path, "%s uses %s, which the registry does not analyse structurally, and it differs between v%d and v%d: keep such parts identical (or use mode none)",
				field(path), strings.Join(slices.Compact(kw), ", "), d.writer, d.reader)
		}
		return
	}
	if w.anyValue {
		d.add(RuleTypeChanged, path, "%s is unconstrained in v%d but constrained in v%d; %s", field(path), d.writer, d.reader, d.consequence())
		return
	}
	if r.never {
		d.add(RuleTypeChanged, path, "%s accepts no value in v%d; %s", field(path), d.reader, d.consequence())
		return
	}
	if r.types != nil && !typesSubset(w.types, r.types) {
		d.add(RuleTypeChanged, path, "%s changed type from %s (v%d) to %s (v%d); %s",
			field(path), typeNames(w.types), d.writer, typeNames(r.types), d.reader, d.consequence())
		return
	}
	if r.enum != nil {
		if w.enum == nil {
			d.add(RuleEnumNarrowed, path, "%s is limited to %s in v%d but not in v%d; %s", field(path), strings.Join(r.enum, ", "), d.reader, d.writer, d.consequence())
		} else {
			for _, v := range w.enum {
				if !slices.Contains(r.enum, v) {
					d.add(RuleEnumNarrowed, path, "%s allows %s in v%d but not in v%d; %s", field(path), v, d.writer, d.reader, d.consequence())
				}
			}
		}
	}
	d.constraints(w, r, path)
	if mayBe(w.types, "object") && mayBe(r.types, "object") {
		d.object(w, r, path)
	}
	if mayBe(w.types, "array") && mayBe(r.types, "array") && r.items != nil {
		wi := w.items
		if wi == nil {
			wi = &node{anyValue: true}
		}
		d.check(wi, r.items, path+"[]")
	}
}

func (d *direction) object(w, r *node, path string) {
	// Required first: it is the rule most changes break.
	for _, name := range slices.Sorted(maps.Keys(r.required)) {
		if !w.required[name] {
			p := join(path, name)
			if d.readerIsNew {
				d.add(RuleRequiredAdded, p, "field %q became required in v%d; data written with v%d may lack it", p, d.reader, d.writer)
			} else {
				d.add(RuleRequiredAdded, p, "field %q is required by v%d but not by v%d; consumers on v%d fail on data written with v%d that lacks it", p, d.reader, d.writer, d.reader, d.writer)
			}
		}
	}
	names := map[string]bool{}
	for k := range w.props {
		names[k] = true
	}
	for k := range r.props {
		names[k] = true
	}
	wa, ra := w.additional, r.additional
	for _, name := range slices.Sorted(maps.Keys(names)) {
		p := join(path, name)
		wp, inW := w.props[name]
		rp, inR := r.props[name]
		switch {
		case inW && inR:
			d.check(wp, rp, p)
		case inR: // the writer governs it through additionalProperties
			switch {
			case wa != nil && wa.never: // a closed writer never carries it
			case wa == nil && !rp.anyValue:
				if d.readerIsNew {
					d.add(RuleOpenModelAdded, p, "field %q added to an open content model in v%d; data written with v%d may already carry %q with any value (close the model with additionalProperties: false, or give the field the additionalProperties schema)", p, d.reader, d.writer, name)
				} else {
					d.add(RuleOpenModelAdded, p, "field %q removed from an open content model in v%d; data written with v%d may carry %q with any value and consumers on v%d expect %s", p, d.writer, d.writer, name, d.reader, typeNames(rp.types))
				}
			case wa != nil:
				d.check(wa, rp, p)
			}
		default: // the reader governs it through additionalProperties
			switch {
			case ra == nil:
			case ra.never && !wp.never:
				if d.readerIsNew {
					d.add(RuleClosedModelReject, p, "field %q removed from a closed content model (additionalProperties: false) in v%d; data written with v%d may carry it and v%d rejects it", p, d.reader, d.writer, d.reader)
				} else {
					d.add(RuleClosedModelReject, p, "field %q added in v%d but v%d has a closed content model (additionalProperties: false); consumers on v%d reject data carrying it", p, d.writer, d.reader, d.reader)
				}
			default:
				d.check(wp, ra, p)
			}
		}
	}
	switch {
	case ra == nil, wa != nil && wa.never:
	case ra.never:
		d.add(RuleModelClosed, path, "%s has a closed content model (additionalProperties: false) in v%d but an open one in v%d; %s", field(path), d.reader, d.writer, d.consequence())
	default:
		if wa == nil {
			wa = &node{anyValue: true}
		}
		d.check(wa, ra, join(path, "<additionalProperties>"))
	}
}

var lowerBounds = map[string]bool{"minimum": true, "exclusiveMinimum": true, "minLength": true, "minItems": true, "minProperties": true}
var upperBounds = map[string]bool{"maximum": true, "exclusiveMaximum": true, "maxLength": true, "maxItems": true, "maxProperties": true}

// constraints compares the remaining validation keywords: a bound may be
// relaxed by the reader, anything else must be identical.
func (d *direction) constraints(w, r *node, path string) {
	for _, k := range slices.Sorted(maps.Keys(r.other)) {
		rv := r.other[k]
		wv, ok := w.other[k]
		if ok && reflect.DeepEqual(wv, rv) {
			continue
		}
		rf, rnum := rv.(float64)
		wf, wnum := wv.(float64)
		if ok && rnum && wnum && (lowerBounds[k] && rf <= wf || upperBounds[k] && rf >= wf) {
			continue
		}
		if !ok {
			d.add(RuleConstraint, path, "%s gains %s %s in v%d; %s", field(path), k, canonJSON(rv), d.reader, d.consequence())
		} else {
			d.add(RuleConstraint, path, "%s has %s %s in v%d but %s in v%d; %s", field(path), k, canonJSON(wv), d.writer, canonJSON(rv), d.reader, d.consequence())
		}
	}
}

func typesSubset(w, r map[string]bool) bool {
	if r == nil {
		return true
	}
	if w == nil {
		return false
	}
	for t := range w {
		if !r[t] && !(t == "integer" && r["number"]) {
			return false
		}
	}
	return true
}

func mayBe(types map[string]bool, t string) bool { return types == nil || types[t] }

// compatibility checks a candidate (to become version next) against the
// existing versions under mode and returns every violation, and the
// versions it was checked against.
func compatibility(mode Mode, next int, candidate any, existing []Version) ([]Violation, []int, error) {
	if mode == ModeNone || len(existing) == 0 {
		return nil, nil, nil
	}
	against := existing[len(existing)-1:]
	if mode.transitive() {
		against = existing
	}
	cand := parseNode(candidate)
	var out []Violation
	var checked []int
	for i := len(against) - 1; i >= 0; i-- {
		old := against[i]
		var doc any
		if err := json.Unmarshal(old.Schema, &doc); err != nil {
			return nil, nil, fmt.Errorf("schema: stored %s v%d is not JSON: %w", old.Subject, old.Version, err)
		}
		prev := parseNode(doc)
		checked = append(checked, old.Version)
		if mode.backward() {
			d := &direction{name: "backward", reader: next, writer: old.Version, readerIsNew: true}
			d.check(prev, cand, "")
			out = append(out, d.violations...)
		}
		if mode.forward() {
			d := &direction{name: "forward", reader: old.Version, writer: next}
			d.check(cand, prev, "")
			out = append(out, d.violations...)
		}
	}
	return out, checked, nil
}
