package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The fast path: validation without decoding the payload into Go values.
//
// A schema that uses only the keywords below is also compiled into a
// fastSchema, which checks a payload directly on its bytes in one pass,
// without allocating: type, properties, required, additionalProperties,
// items, enum (of strings without escapes, booleans and null), minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength,
// minItems, maxItems, and the annotations ($schema, $id, $comment, title,
// description, default, examples, deprecated, readOnly, writeOnly).
//
// Guarantee: the fast path only ever ACCEPTS a payload the full validator
// (santhosh-tekuri/jsonschema, draft 2020-12) accepts. Whenever it is not
// sure (a payload it rejects, a string with escapes under a length or enum
// constraint, a number equal to a bound or not exactly an integer, JSON it
// cannot parse strictly), the full validator decides, so refusals and
// their messages are exactly the full validator's. A schema using any
// other keyword has no fast path at all.

// JSON value kinds, as bits of fastSchema.types.
const (
	kNull uint8 = 1 << iota
	kBool
	kInteger
	kNumber // any number (integers included)
	kString
	kArray
	kObject
)

var kindNames = map[string]uint8{"null": kNull, "boolean": kBool, "integer": kInteger, "number": kNumber, "string": kString, "array": kArray, "object": kObject}

type fastSchema struct {
	types uint8 // 0: any

	props        map[string]*fastSchema
	requiredBit  map[string]uint64
	requiredAll  uint64
	noAdditional bool
	additional   *fastSchema
	items        *fastSchema

	enum [][]byte // raw JSON literals; nil: no enum

	min, max, exMin, exMax             float64
	hasMin, hasMax, hasExMin, hasExMax bool
	// minExact, maxExact: the inclusive bound is an integer a float64
	// holds exactly, so an exact integer value equal to it is inside.
	minExact, maxExact bool
	minLen, maxLen     int // -1: unset
	minItems, maxItems int // -1: unset
}

// anySchema accepts any (well-formed) value.
var anySchema = &fastSchema{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}

// compileFast returns the fast path of a canonical schema text, or nil
// when the schema uses a keyword the fast path does not implement.
func compileFast(canon []byte) *fastSchema {
	d := json.NewDecoder(bytes.NewReader(canon))
	d.UseNumber()
	var doc any
	if d.Decode(&doc) != nil {
		return nil
	}
	fs, ok := fastNode(doc, 0)
	if !ok {
		return nil
	}
	return fs
}

var fastAnnotations = map[string]bool{"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true}

func fastNode(v any, depth int) (*fastSchema, bool) {
	if depth > 32 {
		return nil, false
	}
	if b, ok := v.(bool); ok {
		return anySchema, b // false schemas go the slow way
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	fs := &fastSchema{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	for k, x := range m {
		if fastAnnotations[k] {
			continue
		}
		if !fs.keyword(k, x, depth) {
			return nil, false
		}
	}
	return fs, true
}

// keyword compiles one keyword into fs; false when it is unsupported.
func (fs *fastSchema) keyword(k string, x any, depth int) bool {
	switch k {
	case "type":
		return fs.setTypes(x)
	case "properties":
		pm, ok := x.(map[string]any)
		if !ok {
			return false
		}
		fs.props = make(map[string]*fastSchema, len(pm))
		for name, sub := range pm {
			c, ok := fastNode(sub, depth+1)
			if !ok {
				return false
			}
			fs.props[name] = c
		}
	case "required":
		names, ok := x.([]any)
		if !ok || len(names) > 64 {
			return false
		}
		fs.requiredBit = make(map[string]uint64, len(names))
		for i, n := range names {
			s, ok := n.(string)
			if !ok {
				return false
			}
			fs.requiredBit[s] = 1 << uint(i)
			fs.requiredAll |= 1 << uint(i)
		}
	case "additionalProperties":
		if b, ok := x.(bool); ok {
			fs.noAdditional = !b
			return true
		}
		c, ok := fastNode(x, depth+1)
		fs.additional = c
		return ok
	case "items":
		c, ok := fastNode(x, depth+1)
		fs.items = c
		return ok
	case "enum":
		return fs.setEnum(x)
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		n, ok := x.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		if err != nil {
			return false
		}
		i, ierr := n.Int64()
		exact := ierr == nil && i > -1<<53 && i < 1<<53
		switch k {
		case "minimum":
			fs.min, fs.hasMin, fs.minExact = f, true, exact
		case "maximum":
			fs.max, fs.hasMax, fs.maxExact = f, true, exact
		case "exclusiveMinimum":
			fs.exMin, fs.hasExMin = f, true
		default:
			fs.exMax, fs.hasExMax = f, true
		}
	case "minLength", "maxLength", "minItems", "maxItems":
		n, ok := x.(json.Number)
		if !ok {
			return false
		}
		i, err := n.Int64()
		if err != nil || i < 0 || i > 1<<30 {
			return false
		}
		switch k {
		case "minLength":
			fs.minLen = int(i)
		case "maxLength":
			fs.maxLen = int(i)
		case "minItems":
			fs.minItems = int(i)
		default:
			fs.maxItems = int(i)
		}
	default:
		return false
	}
	return true
}

func (fs *fastSchema) setTypes(x any) bool {
	add := func(v any) bool {
		s, ok := v.(string)
		if !ok || kindNames[s] == 0 {
			return false
		}
		fs.types |= kindNames[s]
		return true
	}
	if list, ok := x.([]any); ok {
		for _, v := range list {
			if !add(v) {
				return false
			}
		}
		return len(list) > 0
	}
	return add(x)
}

func (fs *fastSchema) setEnum(x any) bool {
	list, ok := x.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	fs.enum = make([][]byte, 0, len(list))
	for _, v := range list {
		switch e := v.(type) {
		case string:
			if !utf8.ValidString(e) {
				return false
			}
			for i := 0; i < len(e); i++ {
				if e[i] == '"' || e[i] == '\\' || e[i] < 0x20 {
					return false
				}
			}
			fs.enum = append(fs.enum, []byte(strconv.Quote(e)))
		case bool:
			fs.enum = append(fs.enum, []byte(strconv.FormatBool(e)))
		case nil:
			fs.enum = append(fs.enum, []byte("null"))
		default:
			return false // numbers compare by value, objects structurally: slow path
		}
	}
	return true
}

// accepts reports whether payload certainly conforms to fs (false: not
// certain; ask the full validator).
func (fs *fastSchema) accepts(payload []byte) bool {
	s := scanner{b: payload}
	if !s.value(fs, 0) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

const maxDepth = 256

func (s *scanner) value(fs *fastSchema, depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return fs.allows(kObject) && fs.enum == nil && s.object(fs, depth)
	case c == '[':
		return fs.allows(kArray) && fs.enum == nil && s.array(fs, depth)
	case c == '"':
		return s.str(fs)
	case c == 't':
		return s.literal("true", fs, kBool)
	case c == 'f':
		return s.literal("false", fs, kBool)
	case c == 'n':
		return s.literal("null", fs, kNull)
	case c == '-' || (c >= '0' && c <= '9'):
		return fs.enum == nil && s.number(fs)
	}
	return false
}

func (fs *fastSchema) allows(k uint8) bool { return fs.types == 0 || fs.types&k != 0 }

func (fs *fastSchema) inEnum(raw []byte) bool {
	if fs.enum == nil {
		return true
	}
	for _, e := range fs.enum {
		if bytes.Equal(e, raw) {
			return true
		}
	}
	return false
}

func (s *scanner) literal(lit string, fs *fastSchema, k uint8) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	raw := s.b[s.i : s.i+len(lit)]
	s.i += len(lit)
	return fs.allows(k) && fs.inEnum(raw)
}

// rawString scans a string at s.i and returns its contents (without the
// quotes) and whether it holds an escape; ok false on malformed JSON.
func (s *scanner) rawString() (body []byte, escaped, ok bool) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], escaped, true
		case c == '\\':
			escaped = true
			if j+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+5 >= len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[j+2 : j+6] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				j += 5
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *scanner) str(fs *fastSchema) bool {
	startQuote := s.i
	body, escaped, ok := s.rawString()
	if !ok || !fs.allows(kString) {
		return false
	}
	constrained := fs.enum != nil || fs.minLen >= 0 || fs.maxLen >= 0
	if !constrained {
		return true
	}
	if escaped || !utf8.Valid(body) {
		return false // the decoded form decides: slow path
	}
	if fs.minLen >= 0 || fs.maxLen >= 0 {
		n := utf8.RuneCount(body)
		if (fs.minLen >= 0 && n < fs.minLen) || (fs.maxLen >= 0 && n > fs.maxLen) {
			return false
		}
	}
	return fs.inEnum(s.b[startQuote:s.i])
}

func (s *scanner) number(fs *fastSchema) bool {
	start := s.i
	j := s.i
	if s.b[j] == '-' {
		j++
	}
	digits := func() int {
		k := j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(s.b) && s.b[j] == '0' {
		j++
	} else if digits() == 0 {
		return false
	}
	integer := true
	if j < len(s.b) && s.b[j] == '.' {
		j++
		integer = false
		if digits() == 0 {
			return false
		}
	}
	if j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		integer = false
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = j
	// 1.0 is an integer to JSON Schema: let the slow path say so.
	if !(fs.allows(kNumber) || (integer && fs.types&kInteger != 0)) {
		return false
	}
	if !(fs.hasMin || fs.hasMax || fs.hasExMin || fs.hasExMax) {
		return true
	}
	f, err := strconv.ParseFloat(string(s.b[start:j]), 64)
	if err != nil {
		return false
	}
	// Rounding is monotonic, so a value that rounds strictly inside a
	// bound is inside it; one that rounds onto a bound goes the slow way,
	// unless both are integers a float64 holds exactly (at most 15
	// digits), where equal means equal.
	exact := integer && j-start <= 15
	return (!fs.hasMin || f > fs.min || (f == fs.min && exact && fs.minExact)) &&
		(!fs.hasMax || f < fs.max || (f == fs.max && exact && fs.maxExact)) &&
		(!fs.hasExMin || f > fs.exMin) && (!fs.hasExMax || f < fs.exMax)
}

func (s *scanner) object(fs *fastSchema, depth int) bool {
	s.i++ // '{'
	var seen uint64
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return seen == fs.requiredAll
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, escaped, ok := s.rawString()
		if !ok || escaped || !utf8.Valid(key) {
			return false
		}
		seen |= fs.requiredBit[string(key)]
		sub, declared := fs.props[string(key)]
		if !declared {
			if fs.noAdditional {
				return false
			}
			sub = fs.additional
		}
		if sub == nil {
			sub = anySchema
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !s.value(sub, depth+1) {
			return false
		}
		if end, ok := s.next('}'); !ok || end {
			return ok && seen == fs.requiredAll
		}
	}
}

func (s *scanner) array(fs *fastSchema, depth int) bool {
	s.i++ // '['
	items := fs.items
	if items == nil {
		items = anySchema
	}
	n := 0
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return fs.countOK(0)
	}
	for {
		if !s.value(items, depth+1) {
			return false
		}
		n++
		if end, ok := s.next(']'); !ok || end {
			return ok && fs.countOK(n)
		}
	}
}

// next consumes what follows a member or an element: a ',' (more
// follow), or closing (end); ok is false for anything else.
func (s *scanner) next(closing byte) (end, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, true
	case closing:
		s.i++
		return true, true
	}
	return false, false
}

func (fs *fastSchema) countOK(n int) bool {
	return (fs.minItems < 0 || n >= fs.minItems) && (fs.maxItems < 0 || n <= fs.maxItems)
}
