package conf_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
)

// writeFile writes a configuration file into a temporary directory.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "platformd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// oneNode is the fabric section of a configuration with one node and one
// replica.
const oneNode = `
fabric:
  nodes: 1
  durability:
    replicas: 1
`

// load loads file with exactly env as the environment.
func load(t *testing.T, file string, env ...string) (*conf.Config, error) {
	t.Helper()
	return conf.Load(conf.LoadOptions{File: file, Env: append([]string{}, env...)})
}

func mustLoad(t *testing.T, file string, env ...string) *conf.Config {
	t.Helper()
	c, err := load(t, file, env...)
	if err != nil {
		t.Fatalf("Load(%s): %v", file, err)
	}
	return c
}

// problems returns the keyed problems of a Load error.
func problems(t *testing.T, err error) *validate.Error {
	t.Helper()
	if err == nil {
		t.Fatal("Load: no error, want problems")
	}
	if !errors.Is(err, conf.ErrInvalid) {
		t.Fatalf("error does not wrap ErrInvalid: %v", err)
	}
	var ve *validate.Error
	if !errors.As(err, &ve) {
		t.Fatalf("error is not a *validate.Error: %v", err)
	}
	return ve
}

func wantProblem(t *testing.T, err error, line string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "\n  "+line) {
		t.Errorf("error does not contain the line %q:\n%v", line, err)
	}
}

func TestDevYAML(t *testing.T) {
	c := mustLoad(t, "dev.yaml")
	if c.Mode != conf.ModeFabric || c.DataDir != "data" {
		t.Errorf("mode %q data_dir %q, want fabric, data", c.Mode, c.DataDir)
	}
	f := c.Fabric
	if f.Nodes != 3 || f.Host != "127.0.0.1" || f.Port != 4222 || f.ClusterPort != 6222 || f.DataDir != "data" {
		t.Errorf("fabric = %+v", f)
	}
	if f.Region.Name != "local" || f.Region.Cluster != "local" || f.Region.Domain != "local" {
		t.Errorf("fabric.region = %+v, want local/local/local", f.Region)
	}
	if !f.Durability.SyncAlways || f.Durability.Replicas != 3 {
		t.Errorf("fabric.durability = %+v, want sync_always, replicas 3", f.Durability)
	}
	if c.HTTP.Listen != "127.0.0.1:8080" || !c.Control.Enabled || c.Reconcile.AllowReducedReplicas {
		t.Errorf("http %+v control %+v reconcile %+v", c.HTTP, c.Control, c.Reconcile)
	}
	nodes, err := f.NodeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if n.Port != 4222+i || n.Cluster.Port != 6222+i {
			t.Errorf("node %d listens on %d/%d, want %d/%d", i, n.Port, n.Cluster.Port, 4222+i, 6222+i)
		}
	}

	// Exactly HarborCart's objects.
	want := platform.Catalog{
		Topics: map[string]platform.TopicSpec{
			"orders": {
				Name: "orders", Key: "order:<orderId>", Partitions: 24, Replicas: 3,
				Retention: platform.Retention{MaxAge: 72 * time.Hour}, Owner: "orders-team",
			},
		},
		Groups: map[string]platform.GroupSpec{
			"email-notifier":  {Name: "email-notifier", Topic: "orders"},
			"sales-analytics": {Name: "sales-analytics", Topic: "orders"},
			"fraud-monitor":   {Name: "fraud-monitor", Topic: "orders"},
		},
		Queues: map[string]platform.QueueSpec{
			"shipment-jobs": {
				Name: "shipment-jobs", Lease: 60 * time.Second, MaxAttempts: 5, Replicas: 3,
				Owner: "fulfilment-team",
			},
		},
	}
	if !reflect.DeepEqual(c.Catalog, want) {
		t.Errorf("catalog:\n got %+v\nwant %+v", c.Catalog, want)
	}
}

func TestNodeExampleYAML(t *testing.T) {
	tlsEnv := exampleTLS(t)
	c := mustLoad(t, "node.example.yaml", tlsEnv...)
	n := c.Node
	if c.Mode != conf.ModeNode || n.Name != "n1" || n.Host != "0.0.0.0" || n.Port != 4222 {
		t.Errorf("mode %q node %+v", c.Mode, n)
	}
	if !n.Clustered() || n.Cluster.Port != 6222 || len(n.Cluster.Routes) != 2 {
		t.Errorf("node.cluster = %+v, want port 6222 and 2 routes", n.Cluster)
	}
	if n.Region.Name != "eu" || n.Region.Cluster != "eu" || n.Region.Domain != "eu" {
		t.Errorf("node.region = %+v, want eu with cluster and domain eu", n.Region)
	}
	if n.StoreDir != "/var/lib/platformd/n1" || c.HTTP.Listen != "0.0.0.0:8080" {
		t.Errorf("store_dir %q http %q", n.StoreDir, c.HTTP.Listen)
	}

	// The same file on another host, changed by the environment only.
	c = mustLoad(t, "node.example.yaml", append(tlsEnv,
		"PLATFORM_NODE_NAME=n2",
		"PLATFORM_NODE_STORE_DIR=/var/lib/platformd/n2",
		"PLATFORM_NODE_CLUSTER_ADVERTISE=n2.example.internal:6222",
		"PLATFORM_NODE_CLUSTER_ROUTES=nats-route://n1.example.internal:6222, nats-route://n3.example.internal:6222")...)
	if c.Node.Name != "n2" || c.Node.StoreDir != "/var/lib/platformd/n2" ||
		!reflect.DeepEqual(c.Node.Cluster.Routes, []string{"nats-route://n1.example.internal:6222", "nats-route://n3.example.internal:6222"}) {
		t.Errorf("node after env = %+v", c.Node)
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	c := conf.DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Fabric.DataDir != "data" || c.Node.StoreDir != filepath.Join("data", "n1") {
		t.Errorf("fabric.data_dir %q node.store_dir %q", c.Fabric.DataDir, c.Node.StoreDir)
	}
	// No file at all: the defaults.
	got := mustLoad(t, "")
	if !reflect.DeepEqual(*got, c) {
		t.Errorf("Load with no file:\n got %+v\nwant %+v", *got, c)
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	file := writeFile(t, `
mode: fabric
fabric:
  nodes: 12
  region:
    domain: "a.b"
http:
  listen: localhost
topics:
  orders:
    partitions: 0
    partitons: 24
    retention:
      max_age: 0s
queues:
  shipment-jobs:
    lease: 100ms
    max_attempts: 5
groups:
  fraud-monitor:
    topic: payments
`)
	_, err := load(t, file, "PLATFORM_CONTROL_ENABLED=maybe")
	ve := problems(t, err)
	keys := []string{
		"control.enabled",
		"fabric.nodes",
		"fabric.region.domain",
		"groups.fraud-monitor.topic",
		"http.listen",
		"queues.shipment-jobs.lease",
		"topics.orders.partitions",
		"topics.orders.partitons",
		"topics.orders.retention",
	}
	for _, k := range keys {
		if !ve.Has(k) {
			t.Errorf("no problem keyed %s", k)
		}
	}
	if len(ve.Problems) != len(keys) {
		t.Errorf("%d problems, want %d:\n%v", len(ve.Problems), len(keys), err)
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error does not name the file %s:\n%v", file, err)
	}
	wantProblem(t, err, `control.enabled: expected true or false, got "maybe" (from PLATFORM_CONTROL_ENABLED)`)
	wantProblem(t, err, `groups.fraud-monitor.topic: no topic "payments" is declared`)
	wantProblem(t, err, `fabric.nodes: must be 1..9, got 12`)
}

func TestPartitionsZero(t *testing.T) {
	file := writeFile(t, "topics:\n  orders:\n    partitions: 0\n")
	_, err := load(t, file)
	wantProblem(t, err, "topics.orders.partitions: must be 1..1024, got 0")
}

func TestInvalidMode(t *testing.T) {
	_, err := load(t, writeFile(t, "mode: x\n"))
	wantProblem(t, err, `mode: must be fabric or node, got "x"`)
}

func TestUnknownKeys(t *testing.T) {
	file := writeFile(t, `
htp:
  listen: 127.0.0.1:8080
fabric:
  node: 3
topics:
  orders:
    partitons: 24
`)
	_, err := load(t, file)
	ve := problems(t, err)
	if len(ve.Problems) != 3 {
		t.Errorf("%d problems, want 3:\n%v", len(ve.Problems), err)
	}
	wantProblem(t, err, "htp: unknown key (did you mean http?)")
	wantProblem(t, err, "fabric.node: unknown key (did you mean nodes?)")
	wantProblem(t, err, "topics.orders.partitons: unknown key (did you mean partitions?)")
}

func TestTypeErrors(t *testing.T) {
	file := writeFile(t, `
fabric:
  nodes: three
  durability:
    sync_always: yes
control:
  enabled: 1
topics:
  orders:
    partitions: 2.5
    retention:
      max_age: 3
      max_bytes: lots
queues:
  shipment-jobs:
    lease: 60
    max_attempts: [5]
groups: [email-notifier]
`)
	_, err := load(t, file)
	ve := problems(t, err)
	for _, line := range []string{
		`fabric.nodes: expected a number, got "three"`,
		`fabric.durability.sync_always: expected true or false, got "yes"`,
		`control.enabled: expected true or false, got 1`,
		`topics.orders.partitions: expected a number, got 2.5`,
		`topics.orders.retention.max_age: expected a duration with a unit, such as 60s or 72h, got 3`,
		`topics.orders.retention.max_bytes: expected a size in bytes, such as 10GiB, 500MB or 1048576, got "lots"`,
		`queues.shipment-jobs.lease: expected a duration with a unit, such as 60s or 72h, got 60`,
		`queues.shipment-jobs.max_attempts: expected a number, got a list`,
		`groups: expected a mapping of names to groups, got a list`,
	} {
		wantProblem(t, err, line)
	}
	if len(ve.Problems) != 9 {
		t.Errorf("%d problems, want 9:\n%v", len(ve.Problems), err)
	}
}

func TestEnvOverridesFile(t *testing.T) {
	file := writeFile(t, `
fabric:
  nodes: 3
  durability:
    replicas: 1
http:
  listen: 127.0.0.1:8081
`)
	c := mustLoad(t, file, "PLATFORM_HTTP_LISTEN=127.0.0.1:9999", "PLATFORM_FABRIC_NODES=1", "OTHER=x")
	if c.HTTP.Listen != "127.0.0.1:9999" || c.Fabric.Nodes != 1 {
		t.Errorf("http.listen %q fabric.nodes %d, want 127.0.0.1:9999 and 1", c.HTTP.Listen, c.Fabric.Nodes)
	}
	// An empty variable counts as unset.
	c = mustLoad(t, file, "PLATFORM_HTTP_LISTEN=")
	if c.HTTP.Listen != "127.0.0.1:8081" {
		t.Errorf("http.listen %q, want the file's", c.HTTP.Listen)
	}
	// off disables HTTP.
	c = mustLoad(t, file, "PLATFORM_HTTP_LISTEN=off")
	if c.HTTP.Enabled() {
		t.Errorf("http.listen %q is enabled", c.HTTP.Listen)
	}
}

func TestEnvSetsKeysNotInFile(t *testing.T) {
	c := mustLoad(t, "",
		"PLATFORM_MODE=node",
		"PLATFORM_DATA_DIR=/srv/platform",
		"PLATFORM_NODE_NAME=eu-1",
		"PLATFORM_NODE_PORT=5222",
		"PLATFORM_NODE_DURABILITY_REPLICAS=1",
		"PLATFORM_NODE_DURABILITY_SYNC_ALWAYS=false",
		"PLATFORM_NODE_DURABILITY_SYNC_INTERVAL=30s",
		"PLATFORM_NODE_MAX_STORE=1TiB",
	)
	n := c.Node
	if c.Mode != conf.ModeNode || n.Name != "eu-1" || n.Port != 5222 {
		t.Errorf("mode %q node %+v", c.Mode, n)
	}
	if n.Durability.SyncAlways || n.Durability.SyncInterval != 30*time.Second || n.MaxStore != 1<<40 {
		t.Errorf("durability %+v max_store %d", n.Durability, n.MaxStore)
	}
	if n.StoreDir != filepath.Join("/srv/platform", "eu-1") {
		t.Errorf("node.store_dir %q, want <data_dir>/<name>", n.StoreDir)
	}
	// A value from the environment that is wrong says where it came from.
	_, err := load(t, "", "PLATFORM_FABRIC_NODES=three")
	wantProblem(t, err, `fabric.nodes: expected a number, got "three" (from PLATFORM_FABRIC_NODES)`)
}

func TestEnvChangesDeclaredObjects(t *testing.T) {
	file := writeFile(t, oneNode+`topics:
  orders.eu:
    partitions: 4
    residency: eu
`)
	c := mustLoad(t, file, "PLATFORM_TOPICS_ORDERS_EU_PARTITIONS=8", "PLATFORM_TOPICS_PAYMENTS_PARTITIONS=8")
	if got := c.Catalog.Topics["orders.eu"]; got.Partitions != 8 || got.Name != "orders.eu" || got.Residency != "eu" {
		t.Errorf("orders.eu = %+v", got)
	}
	if len(c.Catalog.Topics) != 1 {
		t.Errorf("the environment declared a topic: %+v", c.Catalog.Topics)
	}
}

func TestFlagsWinOverEnv(t *testing.T) {
	fileDir := writeFile(t, "data_dir: /from/file\n")
	other := writeFile(t, "data_dir: /from/other-file\n")
	flags := func(args ...string) *pflag.FlagSet {
		fs := pflag.NewFlagSet("platformd", pflag.ContinueOnError)
		fs.String(conf.FlagConfig, "", "")
		fs.String(conf.FlagDataDir, "", "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	env := []string{"PLATFORM_DATA_DIR=/from/env"}

	for _, tc := range []struct {
		name  string
		flags *pflag.FlagSet
		env   []string
		want  string
	}{
		{"file", flags(), nil, "/from/file"},
		{"env over file", flags(), env, "/from/env"},
		{"flag over env", flags("--data-dir", "/from/flag"), env, "/from/flag"},
		{"--config over File", flags("--config", other), nil, "/from/other-file"},
		{"PLATFORM_CONFIG over File", flags(), []string{"PLATFORM_CONFIG=" + other}, "/from/other-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := conf.Load(conf.LoadOptions{File: fileDir, Flags: tc.flags, Env: append([]string{}, tc.env...)})
			if err != nil {
				t.Fatal(err)
			}
			if c.DataDir != tc.want || c.Fabric.DataDir != tc.want {
				t.Errorf("data_dir %q fabric.data_dir %q, want %q", c.DataDir, c.Fabric.DataDir, tc.want)
			}
		})
	}

	fs := flags("--data-dir", "")
	_, err := conf.Load(conf.LoadOptions{File: fileDir, Flags: fs, Env: []string{}})
	if err != nil {
		t.Fatalf("--data-dir \"\" should mean the default: %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := load(t, missing)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error %v does not wrap fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error does not name the file: %v", err)
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	file := writeFile(t, "mode: fabric\nfabric:\n  nodes: 3\n   port: 4222\n")
	_, err := load(t, file)
	if !errors.Is(err, conf.ErrInvalid) {
		t.Fatalf("error %v does not wrap ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), file+":4: ") {
		t.Errorf("error does not name file:line %s:4: %v", file, err)
	}
}

func TestCatalogDefaults(t *testing.T) {
	file := writeFile(t, oneNode+`topics:
  orders:
    partitions: 24
  audit:
groups:
  email-notifier:
    topic: orders
queues:
  shipment-jobs: {}
`)
	c := mustLoad(t, file)
	wantTopic := platform.DefaultTopicSpec("orders")
	wantTopic.Partitions, wantTopic.Replicas = 24, 1
	if got := c.Catalog.Topics["orders"]; got != wantTopic {
		t.Errorf("orders = %+v, want %+v", got, wantTopic)
	}
	wantAudit := platform.DefaultTopicSpec("audit")
	wantAudit.Replicas = 1
	if got := c.Catalog.Topics["audit"]; got != wantAudit {
		t.Errorf("audit (declared with no body) = %+v, want %+v", got, wantAudit)
	}
	wantQueue := platform.DefaultQueueSpec("shipment-jobs")
	wantQueue.Replicas = 1
	if got := c.Catalog.Queues["shipment-jobs"]; got != wantQueue {
		t.Errorf("shipment-jobs = %+v, want %+v", got, wantQueue)
	}
	if got := c.Catalog.Groups["email-notifier"]; got.Name != "email-notifier" {
		t.Errorf("group name %q, want it from the key", got.Name)
	}

	// Node mode: replicas from node.durability.
	c = mustLoad(t, writeFile(t, `
mode: node
node:
  cluster:
    port: 6222
    routes: [nats-route://n2.example.internal:6222]
  durability:
    replicas: 5
topics:
  orders: {}
`))
	if r := c.Catalog.Topics["orders"].Replicas; r != 5 {
		t.Errorf("orders replicas %d, want node.durability.replicas 5", r)
	}
}

func TestSizes(t *testing.T) {
	c := mustLoad(t, writeFile(t, `
topics:
  a:
    retention: {max_bytes: 10GiB}
  b:
    retention: {max_bytes: 500MB, max_age: 0s}
  c:
    retention: {max_bytes: 1048576}
`))
	for name, want := range map[string]int64{"a": 10 << 30, "b": 500_000_000, "c": 1 << 20} {
		if got := c.Catalog.Topics[name].Retention.MaxBytes; got != want {
			t.Errorf("%s max_bytes %d, want %d", name, got, want)
		}
	}
}

func TestReplicasMustFit(t *testing.T) {
	_, err := load(t, "dev.yaml", "PLATFORM_FABRIC_NODES=1")
	ve := problems(t, err)
	for _, k := range []string{"fabric.durability.replicas", "topics.orders.replicas", "queues.shipment-jobs.replicas"} {
		if !ve.Has(k) {
			t.Errorf("no problem keyed %s:\n%v", k, err)
		}
	}
	wantProblem(t, err, "topics.orders.replicas: must be <= fabric.nodes (1), got 3")

	// A 1-node dev fabric from dev.yaml: lower every replica count.
	mustLoad(t, "dev.yaml", "PLATFORM_FABRIC_NODES=1", "PLATFORM_FABRIC_DURABILITY_REPLICAS=1",
		"PLATFORM_TOPICS_ORDERS_REPLICAS=1", "PLATFORM_QUEUES_SHIPMENT_JOBS_REPLICAS=1")

	_, err = load(t, writeFile(t, "mode: node\ntopics:\n  orders: {replicas: 3}\n"))
	wantProblem(t, err, "topics.orders.replicas: must be 1 on a standalone node (node.cluster.port is not set), got 3")
	wantProblem(t, err, "node.durability.replicas: must be 1 on a standalone node (node.cluster.port is not set), got 3")
}

func TestPortsMustNotOverlap(t *testing.T) {
	_, err := load(t, "dev.yaml", "PLATFORM_HTTP_LISTEN=127.0.0.1:4223", "PLATFORM_FABRIC_CLUSTER_PORT=4224")
	wantProblem(t, err, "http.listen: port overlaps fabric.port (4222..4224): every listener needs its own port (from PLATFORM_HTTP_LISTEN)")
	wantProblem(t, err, "fabric.cluster_port: port overlaps fabric.port (4222..4224): every listener needs its own port (from PLATFORM_FABRIC_CLUSTER_PORT)")
	// Different hosts do not collide.
	mustLoad(t, "dev.yaml", "PLATFORM_HTTP_LISTEN=127.0.0.2:4223")
}

func TestStringRoundTrip(t *testing.T) {
	for _, file := range []string{"dev.yaml", "node.example.yaml"} {
		t.Run(file, func(t *testing.T) {
			c := mustLoad(t, file, exampleTLS(t)...)
			out := c.String()
			for _, want := range []string{"max_age: 72h\n", "partitions: 24\n", "lease: 1m\n", "sync_interval: 2m\n"} {
				if file == "dev.yaml" && !strings.Contains(out, want) {
					t.Errorf("String() lacks %q:\n%s", want, out)
				}
			}
			again := mustLoad(t, writeFile(t, out))
			if !reflect.DeepEqual(normalize(again), normalize(c)) {
				t.Errorf("String() does not load back the same config:\n%s", out)
			}
			if again.String() != out {
				t.Errorf("String() is not stable")
			}
		})
	}
}

// normalize makes nil and empty lists equal.
func normalize(c *conf.Config) conf.Config {
	n := *c
	for _, l := range []*[]string{&n.Node.Tags, &n.Node.Cluster.Routes} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return n
}
