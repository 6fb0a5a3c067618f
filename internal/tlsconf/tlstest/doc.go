// Package tlstest makes throw-away certificate authorities for tests and
// rigs: a CA, server certificates for loopback and named hosts, client
// certificates, written as PEM files (keys 0600) in a directory.
package tlstest
