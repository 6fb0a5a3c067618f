// Package daemontest starts a real platformd (fabric mode, free ports,
// t.TempDir() data) in-process for tests of the daemon and of the CLI.
package daemontest
