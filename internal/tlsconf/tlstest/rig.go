package tlstest

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/msgplatform/platform/internal/tlsconf"
)

// Rig file names, written by WriteRig in its directory.
const (
	RigCA         = "ca.pem"         // the CA certificate
	RigNodeCert   = "node.pem"       // every node's certificate (server and client use)
	RigNodeKey    = "node-key.pem"   // its key (0600)
	RigClientCert = "client.pem"     // a client certificate (operator, tests)
	RigClientKey  = "client-key.pem" // its key (0600)
)

// RigFiles are the paths of the files WriteRig wrote.
type RigFiles struct {
	Dir string
	// Node is the listener Config of every node (Verify off; a rig turns
	// it on per port).
	Node tlsconf.Config
	// Client is a client certificate with the CA.
	Client tlsconf.Config
}

// CAFile is the CA certificate's path.
func (r RigFiles) CAFile() string { return r.Node.CAFile }

// WriteRig makes a throw-away CA in dir and writes, under the fixed names
// above, one certificate for every node of a rig (valid for hosts and
// loopback; for serving and for dialling routes and leafnodes) and one
// client certificate. A rig mounts dir read-only into its containers.
// The previous files in dir are replaced.
func WriteRig(dir string, hosts ...string) (RigFiles, error) {
	tmp := filepath.Join(dir, ".issue")
	if err := os.RemoveAll(tmp); err != nil {
		return RigFiles{}, err
	}
	defer os.RemoveAll(tmp)
	ca, err := New(tmp)
	if err != nil {
		return RigFiles{}, err
	}
	node, err := ca.Server("node", hosts...)
	if err != nil {
		return RigFiles{}, err
	}
	client, err := ca.Client("client")
	if err != nil {
		return RigFiles{}, err
	}
	out := RigFiles{Dir: dir}
	mv := func(from, name string) (string, error) {
		to := filepath.Join(dir, name)
		if err := os.Rename(from, to); err != nil {
			return "", fmt.Errorf("tlstest: %w", err)
		}
		return to, nil
	}
	moves := []struct {
		from, name string
		to         *string
	}{
		{ca.CAFile, RigCA, &out.Node.CAFile},
		{node.CertFile, RigNodeCert, &out.Node.CertFile},
		{node.KeyFile, RigNodeKey, &out.Node.KeyFile},
		{client.CertFile, RigClientCert, &out.Client.CertFile},
		{client.KeyFile, RigClientKey, &out.Client.KeyFile},
	}
	for _, m := range moves {
		if *m.to, err = mv(m.from, m.name); err != nil {
			return RigFiles{}, err
		}
	}
	out.Client.CAFile = out.Node.CAFile
	return out, nil
}
