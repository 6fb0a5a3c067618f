// Package consoletest runs what the console's tests sign in to: a
// platformd (daemontest) whose console serves on a loopback HTTP port,
// with tenants, topics, DLQ entries and users made on demand, and every
// user's .creds at hand. The console's HTTP tests and its browser tests
// (the nested browsertest module) share it; it is for tests only.
package consoletest
