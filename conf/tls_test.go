package conf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// exampleTLS makes, with a throw-away CA, the files node.example.yaml
// names under /etc/platformd/tls/ and returns the environment that points
// its keys at them.
func exampleTLS(t *testing.T) []string {
	t.Helper()
	ca := tlstest.NewT(t)
	n := ca.ServerT(t, "n1", "n1.example.internal")
	var env []string
	for _, k := range []string{"PLATFORM_NODE_TLS", "PLATFORM_NODE_CLUSTER_TLS", "PLATFORM_HTTP_TLS"} {
		env = append(env, k+"_CERT_FILE="+n.CertFile, k+"_KEY_FILE="+n.KeyFile, k+"_CA_FILE="+ca.CAFile)
	}
	return env
}

// nodeListening is mode node with client, routes, leafnodes and HTTP on
// host, a route to route and a leafnode remote at leaf (host:port each),
// and no TLS anywhere.
func nodeListening(host, route, leaf string) string {
	return fmt.Sprintf(`
mode: node
node:
  name: n1
  host: %[1]s
  cluster: {host: %[1]s, port: 6222, routes: ["nats-route://%[2]s"]}
  leaf: {host: %[1]s, port: 7422, remotes: [{urls: ["nats-leaf://%[3]s"]}]}
http: {listen: "%[1]s:8080"}
`, host, route, leaf)
}

// nodeOnEveryInterface is nodeListening on 0.0.0.0, its peers elsewhere.
var nodeOnEveryInterface = nodeListening("0.0.0.0", "n2.example.internal:6222", "us1.example.internal:7422")

// A node whose listeners leave the host without TLS refuses to start,
// each listener's key named; insecure: true accepts it, and loopback
// listeners need no TLS.
func TestTransportNeedsTLSOffLoopback(t *testing.T) {
	_, err := load(t, writeFile(t, nodeOnEveryInterface))
	for _, line := range []string{
		"node.tls: clients listen on 0.0.0.0 without TLS; set node.tls or insecure: true",
		"node.cluster.tls: routes listen on 0.0.0.0 without TLS; set node.cluster.tls or insecure: true",
		"node.leaf.tls: leafnodes listen on 0.0.0.0 without TLS; set node.leaf.tls or insecure: true",
		"node.leaf.tls: leafnode remotes dial us1.example.internal:7422 without TLS; set node.leaf.tls or insecure: true",
		"http.tls: HTTP listens on 0.0.0.0 without TLS; set http.tls or insecure: true",
	} {
		wantProblem(t, err, line)
	}
	mustLoad(t, writeFile(t, nodeOnEveryInterface+"insecure: true\n"))
	mustLoad(t, writeFile(t, nodeOnEveryInterface), "PLATFORM_INSECURE=true")
	// An empty host is every interface too.
	_, err = load(t, writeFile(t, "mode: node\nnode: {name: n1}\nhttp: {listen: \":8080\"}\n"), "PLATFORM_NODE_DURABILITY_REPLICAS=1")
	wantProblem(t, err, "http.tls: HTTP listens on every interface without TLS; set http.tls or insecure: true")

	mustLoad(t, writeFile(t, nodeListening("127.0.0.1", "127.0.0.1:6223", "localhost:7423")))
	// Development modes are not checked: conf/dev.yaml loads as before.
	mustLoad(t, "dev.yaml")
}

// TLS on every listener satisfies the check; a TLS key whose file is
// missing is named.
func TestTransportTLSFiles(t *testing.T) {
	env := exampleTLS(t)
	leaf := []string{"PLATFORM_NODE_LEAF_TLS_CERT_FILE", "PLATFORM_NODE_LEAF_TLS_KEY_FILE", "PLATFORM_NODE_LEAF_TLS_CA_FILE"}
	for i, k := range leaf {
		env = append(env, k+"="+strings.SplitN(env[i], "=", 2)[1])
	}
	c := mustLoad(t, writeFile(t, nodeOnEveryInterface), env...)
	if !c.Node.TLS.Enabled() || !c.Node.Cluster.TLS.Enabled() || !c.Node.Leaf.TLS.Enabled() || !c.HTTP.TLS.Enabled() {
		t.Fatalf("TLS not decoded: %+v %+v %+v %+v", c.Node.TLS, c.Node.Cluster.TLS, c.Node.Leaf.TLS, c.HTTP.TLS)
	}
	// The example as shipped names files this machine does not have.
	_, err := load(t, "node.example.yaml")
	if err == nil || !strings.Contains(err.Error(), "node.tls.cert_file: cannot be read") ||
		!strings.Contains(err.Error(), "node.cluster.tls.ca_file: cannot be read") || !strings.Contains(err.Error(), "http.tls.key_file: cannot be read") {
		t.Fatalf("missing TLS files not named: %v", err)
	}
}
