// Command tlsgen writes a throw-away CA and the certificates of a Docker
// rig (deploy/docker, deploy/docker-regions) into a directory the rig
// mounts read-only at /tls:
//
//	go run ./deploy/tlsgen --dir deploy/docker/shared/tls --hosts n1,n2,n3
//
// ca.pem, node.pem and node-key.pem (one certificate for every node, valid
// for --hosts and loopback), client.pem and client-key.pem (a client
// certificate). Keys are written 0600: hand the directory to the
// containers' user (chown -R 65532:65532). Nothing it writes is meant to
// be kept or committed; run it again for a new CA.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

func main() {
	dir := flag.String("dir", "", "directory to write the files in (created 0700)")
	hosts := flag.String("hosts", "", "comma-separated host names the nodes are dialled by (container names, link and peer aliases)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "tlsgen: usage: tlsgen --dir DIR [--hosts n1,n2,n3]")
		os.Exit(2)
	}
	var hs []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "tlsgen:", err)
		os.Exit(1)
	}
	r, err := tlstest.WriteRig(*dir, hs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsgen:", err)
		os.Exit(1)
	}
	fmt.Printf("tlsgen: CA %s, node certificate %s (hosts %s and loopback), client certificate %s\n",
		r.CAFile(), r.Node.CertFile, strings.Join(hs, ","), r.Client.CertFile)
}
