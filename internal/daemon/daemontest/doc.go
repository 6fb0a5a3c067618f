// Package daemontest starts a real platformd (fabric mode, free ports,
// t.TempDir() data) in-process for tests of the daemon and of the CLI,
// and gives those tests an admin connection, a tenant with a DLQ, and a
// GET on the daemon's HTTP port.
package daemontest
