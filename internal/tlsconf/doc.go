// Package tlsconf is the one place TLS settings are described and turned
// into crypto/tls configurations, for every listener (client, route,
// leafnode, HTTP) and every connection the platform makes (nats.go, wire,
// platformctl, the outbox relay).
//
// Guarantees:
//   - a Config names files, never inline keys; Validate reports every
//     missing or unreadable file by key, so a bad TLS setting fails at
//     start, not at the first handshake;
//   - Server requires TLS 1.2 or later and, with Verify, a client
//     certificate signed by the CA (mTLS);
//   - Client verifies the server against the CA when one is named (the
//     system pool otherwise) and presents a certificate when one is named.
package tlsconf
