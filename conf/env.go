package conf

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
)

// EnvPrefix starts the name of every environment variable Load reads.
const EnvPrefix = "PLATFORM_"

// envConfigFile names the configuration file (below --config).
const envConfigFile = EnvPrefix + "CONFIG"

// envKey is one configuration key an environment variable sets.
type envKey struct {
	path []string // e.g. fabric, nodes
	name string   // e.g. PLATFORM_FABRIC_NODES
}

// envName is the environment variable for a key path: PLATFORM_ + the path
// joined with '_', upper case, with '-' and '.' in names as '_'.
func envName(path []string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	return EnvPrefix + strings.ToUpper(r.Replace(strings.Join(path, "_")))
}

// envKeys lists every leaf key of type t (following ",squash") that an
// environment variable can set. The entries of maps (topics, queues,
// groups) come from file, the file's settings: the environment can change a
// declared object, not declare one.
func envKeys(t reflect.Type, file any, path []string, out *[]envKey) {
	switch {
	case t == durationType:
	case t.Kind() == reflect.Struct:
		m, _ := file.(map[string]any)
		fields := fieldsOf(t)
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			envKeys(fields[k], m[k], append(path[:len(path):len(path)], k), out)
		}
		return
	case t.Kind() == reflect.Map:
		m, _ := file.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			envKeys(t.Elem(), m[k], append(path[:len(path):len(path)], k), out)
		}
		return
	}
	*out = append(*out, envKey{path: path, name: envName(path)})
}

// environ turns KEY=VALUE pairs into a map; the last pair for a key wins.
// nil means the process environment.
func environ(env []string) map[string]string {
	if env == nil {
		env = os.Environ()
	}
	out := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// envLayer builds the nested settings the environment sets, and records
// which variable set each key. Two keys with one variable name (possible
// only for object names such as orders.eu and orders-eu) are a problem
// when the variable is set.
func envLayer(keys []envKey, env map[string]string, ps *problems) map[string]any {
	byName := map[string][]envKey{}
	for _, k := range keys {
		byName[k.name] = append(byName[k.name], k)
	}
	names := slices.Sorted(maps.Keys(byName))

	layer := map[string]any{}
	for _, name := range names {
		val, ok := env[name]
		if !ok || val == "" {
			continue
		}
		ks := byName[name]
		if len(ks) > 1 {
			var dotted []string
			for _, k := range ks {
				dotted = append(dotted, strings.Join(k.path, "."))
			}
			ps.add(dotted[0], name+" is ambiguous: it names "+strings.Join(dotted, " and "))
			continue
		}
		setPath(layer, ks[0].path, val)
		ps.source[strings.Join(ks[0].path, ".")] = name
	}
	return layer
}

// setPath sets m[path[0]][path[1]]... = v, creating maps on the way.
func setPath(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}
