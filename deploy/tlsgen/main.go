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
