package conf

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/tenancy"
)

// Flags Load reads from LoadOptions.Flags when they were set on the command
// line. The caller defines them (platformd does).
const (
	FlagConfig  = "config"   // the configuration file, over PLATFORM_CONFIG and LoadOptions.File
	FlagDataDir = "data-dir" // data_dir, over PLATFORM_DATA_DIR and the file
)

// keyDelim separates key path segments inside viper. Not ".", because
// topic and queue names contain dots (orders.eu).
const keyDelim = "::"

// catalogSections are the top-level keys holding declared objects.
var catalogSections = []string{"topics", "queues", "groups", "tenants"}

// LoadOptions says where Load reads the configuration from.
type LoadOptions struct {
	// File is the YAML configuration file; "" for none (defaults,
	// environment and flags only). PLATFORM_CONFIG overrides it, and
	// --config overrides both.
	File string
	// Flags, if not nil, is read for --config and --data-dir, each only
	// when it was set on the command line.
	Flags *pflag.FlagSet
	// Env is the environment as KEY=VALUE pairs; nil means os.Environ().
	Env []string
}

// Load reads the configuration: defaults, then the YAML file, then
// PLATFORM_* environment variables, then flags; applies the defaults of
// every object; and validates the result. Every problem (unknown keys,
// values of the wrong type, invalid values) is reported in one
// *validate.Error wrapping ErrInvalid, each keyed by its YAML path. A
// missing file is an error wrapping fs.ErrNotExist.
func Load(opts LoadOptions) (*Config, error) {
	env := environ(opts.Env)
	file := opts.File
	if f := env[envConfigFile]; f != "" {
		file = f
	}
	if f, ok := flagValue(opts.Flags, FlagConfig); ok {
		file = f
	}

	v := viper.NewWithOptions(viper.KeyDelimiter(keyDelim))
	v.SetConfigType("yaml")
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return nil, fileError(file, err)
		}
	}

	ps := newProblems()
	// The environment is a layer over the file; viper's own env binding
	// reads only the process environment, so the layer is built here from
	// the struct's keys and merged below the flags.
	var keys []envKey
	envKeys(reflect.TypeFor[Config](), settings(v), nil, &keys)
	if layer := envLayer(keys, env, ps); len(layer) > 0 {
		if err := v.MergeConfigMap(layer); err != nil {
			return nil, fmt.Errorf("conf: environment: %w", err)
		}
	}
	if dd, ok := flagValue(opts.Flags, FlagDataDir); ok {
		v.Set("data_dir", dd)
		ps.source["data_dir"] = "--" + FlagDataDir
	}

	cfg := decode(settings(v), ps)
	ps.addValidation(cfg.Validate())
	if err := ps.err(file); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decode turns the merged settings into a Config, recording every problem.
func decode(raw map[string]any, ps *problems) *Config {
	checkKeys(ps, reflect.TypeFor[Config](), raw, "")

	cfg := baseConfig()
	rest := maps.Clone(raw)
	for _, s := range catalogSections {
		delete(rest, s)
	}
	if err := decodeInto(rest, &cfg); err != nil {
		ps.addDecodeError("", err)
	}
	// Derive the defaults that depend on decoded values (stores from
	// data_dir, cluster and domain from the region), before the catalog:
	// its replicas default to the active durability.
	cfg.EnsureDefaults()

	replicas := cfg.Durability().Replicas
	cfg.Catalog.Topics = decodeEntries(raw, "topics", ps, func(name string) platform.TopicSpec {
		t := platform.DefaultTopicSpec(name)
		t.Replicas = replicas
		return t
	})
	cfg.Catalog.Queues = decodeEntries(raw, "queues", ps, func(name string) platform.QueueSpec {
		q := platform.DefaultQueueSpec(name)
		q.Replicas = replicas
		return q
	})
	cfg.Catalog.Groups = decodeEntries(raw, "groups", ps, func(name string) platform.GroupSpec {
		return platform.GroupSpec{Name: name}
	})
	cfg.Tenants = decodeEntries(raw, "tenants", ps, tenancy.DefaultSpec)
	return &cfg
}

// decodeEntries decodes the map at raw[section], each entry onto the
// defaults def(key) so that omitted keys keep them.
func decodeEntries[T any](raw map[string]any, section string, ps *problems, def func(name string) T) map[string]T {
	v, ok := raw[section]
	if !ok || v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		ps.add(section, "expected a mapping of names to "+section+", got "+describeValue(v))
		return nil
	}
	out := make(map[string]T, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		spec := def(k)
		if err := decodeInto(m[k], &spec); err != nil {
			ps.addDecodeError(section+"."+k, err)
		}
		out[k] = spec
	}
	return out
}

// settings returns viper's merged settings as nested maps. AllSettings
// drops keys whose value is null, so the catalog sections are taken whole:
// "orders:" with no body declares a topic with every default.
func settings(v *viper.Viper) map[string]any {
	m := v.AllSettings()
	for _, s := range catalogSections {
		if raw := v.Get(s); raw != nil {
			m[s] = raw
		}
	}
	return m
}

func flagValue(fs *pflag.FlagSet, name string) (string, bool) {
	if fs == nil {
		return "", false
	}
	f := fs.Lookup(name)
	if f == nil || !f.Changed {
		return "", false
	}
	return f.Value.String(), true
}

var yamlLineRE = regexp.MustCompile(`line (\d+): ([^\n]*)`)

// fileError describes a file that could not be read or parsed, naming the
// file and, for YAML errors, the line.
func fileError(file string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("conf: configuration file %s: %w", file, pe.Err)
	}
	var ce viper.ConfigParseError
	if errors.As(err, &ce) {
		inner := ce.Unwrap()
		msg := inner.Error()
		if ms := yamlLineRE.FindAllStringSubmatch(msg, -1); len(ms) > 0 {
			var parts []string
			for _, m := range ms {
				parts = append(parts, file+":"+m[1]+": "+m[2])
			}
			return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(parts, "; "))
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalid, file, msg)
	}
	return fmt.Errorf("conf: configuration file %s: %w", file, err)
}
