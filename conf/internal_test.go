package conf

import (
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The decode hook parses every int64 as a byte count (10GiB). This guards
// that assumption: a new int64 field that is not a byte count must get its
// own type or a change to convert.
func TestInt64FieldsAreByteCounts(t *testing.T) {
	var got []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		switch {
		case t == durationType:
		case t.Kind() == reflect.Int64:
			got = append(got, path)
		case t.Kind() == reflect.Struct:
			fields := fieldsOf(t)
			for _, k := range slices.Sorted(maps.Keys(fields)) {
				walk(fields[k], join(path, k))
			}
		case t.Kind() == reflect.Map:
			walk(t.Elem(), join(path, "*"))
		case t.Kind() == reflect.Slice:
			walk(t.Elem(), path+"[]")
		}
	}
	walk(reflect.TypeFor[Config](), "")
	want := []string{"node.max_memory", "node.max_store",
		"tenants.*.quota.max_payload", "tenants.*.quota.publish_bytes_rate",
		"tenants.*.quota.storage.r1.disk", "tenants.*.quota.storage.r1.memory",
		"tenants.*.quota.storage.r3.disk", "tenants.*.quota.storage.r3.memory",
		"topics.*.retention.max_bytes"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("int64 fields %v, want exactly the byte counts %v", got, want)
	}
}

func TestEnvNames(t *testing.T) {
	file := map[string]any{
		"topics": map[string]any{"orders": nil, "orders.eu": nil},
		"queues": map[string]any{"shipment-jobs": nil},
		"groups": map[string]any{"email-notifier": nil},
	}
	var keys []envKey
	envKeys(reflect.TypeFor[Config](), file, nil, &keys)
	valid := regexp.MustCompile(`^PLATFORM_[A-Z0-9_]+$`)
	seen := map[string]string{}
	for _, k := range keys {
		dotted := strings.Join(k.path, ".")
		if !valid.MatchString(k.name) {
			t.Errorf("%s: env name %q is not a valid variable name", dotted, k.name)
		}
		if prev, dup := seen[k.name]; dup {
			t.Errorf("%s and %s share the env name %s", prev, dotted, k.name)
		}
		seen[k.name] = dotted
	}
	for name, key := range map[string]string{
		"PLATFORM_DATA_DIR":                         "data_dir",
		"PLATFORM_HTTP_LISTEN":                      "http.listen",
		"PLATFORM_FABRIC_NODES":                     "fabric.nodes",
		"PLATFORM_FABRIC_CLUSTER_PORT":              "fabric.cluster_port",
		"PLATFORM_NODE_PORT":                        "node.port",
		"PLATFORM_NODE_CLUSTER_PORT":                "node.cluster.port",
		"PLATFORM_RECONCILE_ALLOW_REDUCED_REPLICAS": "reconcile.allow_reduced_replicas",
		"PLATFORM_TOPICS_ORDERS_EU_PARTITIONS":      "topics.orders.eu.partitions",
		"PLATFORM_QUEUES_SHIPMENT_JOBS_LEASE":       "queues.shipment-jobs.lease",
		"PLATFORM_GROUPS_EMAIL_NOTIFIER_TOPIC":      "groups.email-notifier.topic",
	} {
		if seen[name] != key {
			t.Errorf("%s sets %q, want %q", name, seen[name], key)
		}
	}
	if t.Failed() {
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Log(strings.Join(names, "\n"))
	}
}

func TestAmbiguousEnvName(t *testing.T) {
	ps := newProblems()
	keys := []envKey{
		{path: []string{"topics", "orders.eu", "partitions"}, name: "PLATFORM_TOPICS_ORDERS_EU_PARTITIONS"},
		{path: []string{"topics", "orders-eu", "partitions"}, name: "PLATFORM_TOPICS_ORDERS_EU_PARTITIONS"},
	}
	envLayer(keys, map[string]string{"PLATFORM_TOPICS_ORDERS_EU_PARTITIONS": "3"}, ps)
	err := ps.err("")
	if err == nil || !strings.Contains(err.Error(), "is ambiguous") {
		t.Errorf("want an ambiguity problem, got %v", err)
	}
}
