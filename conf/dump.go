package conf

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/msgplatform/platform/internal/units"
)

// String renders c as YAML under the keys of the configuration file,
// sorted, with durations (72h) and sizes (10GiB) as a file would write
// them: the effective configuration that platformd --print-config shows.
// Loading the output gives c back. It is safe to log: the configuration
// holds no secrets today, and a secret field added later must be masked
// here.
func (c *Config) String() string {
	m, _ := settingsOf(reflect.ValueOf(*c)).(map[string]any)
	v := viper.NewWithOptions(viper.KeyDelimiter(keyDelim))
	v.SetConfigType("yaml")
	if err := v.MergeConfigMap(m); err != nil {
		return "conf: cannot render the configuration: " + err.Error()
	}
	var b bytes.Buffer
	if err := v.WriteConfigTo(&b); err != nil {
		return "conf: cannot render the configuration: " + err.Error()
	}
	return b.String()
}

// settingsOf turns a value into the nested maps, lists and scalars of a
// configuration file, keyed by mapstructure tags.
func settingsOf(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return units.ShortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Int64:
		return formatSize(v.Int())
	}
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, squash, ok := settingKey(f)
			if !ok {
				continue
			}
			if squash {
				for k, x := range settingsOf(v.Field(i)).(map[string]any) {
					out[k] = x
				}
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			out[name] = settingsOf(v.Field(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[k.String()] = settingsOf(v.MapIndex(k))
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = settingsOf(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// formatSize writes n in the largest binary unit that divides it (10GiB),
// or as a plain number.
func formatSize(n int64) any {
	if s := units.ExactSize(n); n != 0 && s != strconv.FormatInt(n, 10) {
		return s
	}
	return n
}
