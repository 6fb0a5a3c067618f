package conf

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"

	"github.com/msgplatform/platform/internal/units"
)

// This file turns the merged settings (nested maps of YAML values and
// environment strings) into typed values, and every way that can fail into
// a keyed problem.

var durationType = reflect.TypeOf(time.Duration(0))

// decodeInto decodes raw onto out (a pointer), keeping out's values for the
// keys raw omits. Errors name keys relative to raw.
func decodeInto(raw any, out any) error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook: mapstructure.DecodeHookFuncType(convert),
		// Strict: convert does every conversion it allows (strings from the
		// environment to numbers, booleans, durations and lists; scalars to
		// strings), so nothing else is coerced silently (true to 1, 2.5 to 2).
		WeaklyTypedInput: false,
		// Unknown keys are reported by checkKeys, with a suggestion.
		ErrorUnused: false,
		Result:      out,
	})
	if err != nil {
		return err
	}
	return d.Decode(raw)
}

// valueError is a value of the wrong type or form for its key.
type valueError struct {
	want string // e.g. "a number"
	got  any
}

func (e *valueError) Error() string {
	return "expected " + e.want + ", got " + describeValue(e.got)
}

// convert is the decode hook: it converts data to the type of the field it
// is decoded into, or says what was expected. Every int64 field of Config
// is a byte count (a test guards this), so int64 takes sizes.
func convert(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if data == nil {
		return nil, nil
	}
	switch {
	case to == durationType:
		return toDuration(data)
	case to.Kind() == reflect.Int64:
		return toSize(data)
	case to.Kind() >= reflect.Int && to.Kind() <= reflect.Int32:
		return toInt(data)
	case to.Kind() == reflect.Bool:
		return toBool(data)
	case to.Kind() == reflect.String:
		return toString(data)
	case to.Kind() == reflect.Slice:
		return toList(data)
	case to.Kind() == reflect.Struct, to.Kind() == reflect.Map:
		if _, ok := data.(map[string]any); !ok {
			return nil, &valueError{want: "a mapping", got: data}
		}
	}
	return data, nil
}

func toDuration(data any) (any, error) {
	const want = "a duration with a unit, such as 60s or 72h"
	switch v := data.(type) {
	case time.Duration:
		return v, nil
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return nil, &valueError{want: want, got: data}
		}
		return d, nil
	case int:
		if v == 0 {
			return time.Duration(0), nil
		}
	}
	return nil, &valueError{want: want, got: data}
}

func toSize(data any) (any, error) {
	const want = "a size in bytes, such as 10GiB, 500MB or 1048576"
	if s, ok := data.(string); ok {
		n, err := units.ParseSize(s)
		if err != nil {
			return nil, &valueError{want: want, got: data}
		}
		return n, nil
	}
	n, ok := wholeNumber(data)
	if !ok {
		return nil, &valueError{want: want, got: data}
	}
	return n, nil
}

func toInt(data any) (any, error) {
	if s, ok := data.(string); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, &valueError{want: "a number", got: data}
		}
		return n, nil
	}
	n, ok := wholeNumber(data)
	if !ok {
		return nil, &valueError{want: "a number", got: data}
	}
	return n, nil
}

// wholeNumber accepts YAML integers and integral floats.
func wholeNumber(data any) (int64, bool) {
	switch v := data.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case uint64:
		return int64(v), v <= math.MaxInt64
	case float64:
		return int64(v), v == math.Trunc(v) && math.Abs(v) < 1<<63
	}
	return 0, false
}

func toBool(data any) (any, error) {
	switch v := data.(type) {
	case bool:
		return v, nil
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			return b, nil
		}
	}
	return nil, &valueError{want: "true or false", got: data}
}

func toString(data any) (any, error) {
	switch v := data.(type) {
	case string:
		return v, nil
	case int, int64, uint64, bool:
		return fmt.Sprint(v), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	}
	return nil, &valueError{want: "a string", got: data}
}

// toList takes a YAML list, a comma-separated string (the environment's
// form) or a single scalar (a list of one).
func toList(data any) (any, error) {
	switch v := data.(type) {
	case []any, []string:
		return v, nil
	case string:
		out := []string{}
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	case map[string]any:
		return nil, &valueError{want: "a list", got: data}
	}
	return []any{data}, nil
}

// describeValue names a configuration value in an error message.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a mapping"
	case []any, []string:
		return "a list"
	}
	return fmt.Sprint(v)
}

// describeType names what a field of type t takes.
func describeType(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list"
	}
	return "a mapping"
}

// addDecodeError records each problem of a mapstructure error under prefix.
func (ps *problems) addDecodeError(prefix string, err error) {
	for _, e := range leaves(err) {
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			ps.add(prefix, e.Error())
			continue
		}
		key := join(prefix, de.Name())
		var ve *valueError
		var pe *mapstructure.ParseError
		var ue *mapstructure.UnconvertibleTypeError
		switch inner := de.Unwrap(); {
		case errors.As(inner, &ve):
			ps.add(key, ve.Error())
		case errors.As(inner, &pe):
			ps.add(key, "expected "+describeType(pe.Expected.Type())+", got "+describeValue(pe.Value))
		case errors.As(inner, &ue):
			ps.add(key, "expected "+describeType(ue.Expected.Type())+", got "+describeValue(ue.Value))
		default:
			ps.add(key, inner.Error())
		}
	}
}

// leaves flattens the error tree of a decode (errors joined, and the join
// wrapped once more by the decoder) into its *mapstructure.DecodeError
// leaves and any other error.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*mapstructure.DecodeError); ok {
		return []error{err}
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, x := range e.Unwrap() {
			out = append(out, leaves(x)...)
		}
		return out
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return leaves(inner)
		}
	}
	return []error{err}
}

// checkKeys reports every key of raw that type t has no field for, with
// the nearest known key as a suggestion. Values of the wrong shape are left
// to the decoder.
func checkKeys(ps *problems, t reflect.Type, raw any, path string) {
	m, isMap := raw.(map[string]any)
	switch {
	case t == durationType:
	case t.Kind() == reflect.Struct && isMap:
		fields := fieldsOf(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ft, ok := fields[k]
			if !ok {
				msg := "unknown key"
				if s := nearest(k, fields); s != "" {
					msg += " (did you mean " + s + "?)"
				}
				ps.add(join(path, k), msg)
				continue
			}
			checkKeys(ps, ft, m[k], join(path, k))
		}
	case t.Kind() == reflect.Map && isMap:
		for _, k := range slices.Sorted(maps.Keys(m)) {
			checkKeys(ps, t.Elem(), m[k], join(path, k))
		}
	case t.Kind() == reflect.Slice:
		if l, ok := raw.([]any); ok {
			for i, v := range l {
				checkKeys(ps, t.Elem(), v, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
}

// fieldsOf maps the (lower-case) keys of struct type t to their field
// types, following ",squash".
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, squash, ok := settingKey(f)
		if !ok {
			continue
		}
		if squash || (f.Anonymous && name == "") {
			for k, v := range fieldsOf(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = f.Type
	}
	return out
}

// settingKey returns field f's mapstructure tag name ("" for none) and
// whether ",squash" merges its fields into its parent's; ok is false for
// a field that is not a setting (unexported, or tagged "-").
func settingKey(f reflect.StructField) (name string, squash, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	if name == "-" {
		return "", false, false
	}
	return name, strings.Contains(opts, "squash"), true
}

// nearest returns the key of fields closest to k (edit distance <= 2), or
// "".
func nearest(k string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if d := editDistance(k, f); d < bestD {
			best, bestD = f, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	case strings.HasPrefix(key, "["):
		return prefix + key
	default:
		return prefix + "." + key
	}
}
