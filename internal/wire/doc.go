// Package wire is a minimal NATS client for forwarding messages: one
// connection, subscriptions with a callback that gets the message's
// subject, reply, header block and payload as slices of the read buffer
// (no copy, no allocation), and publishes written into one buffer that is
// flushed when the read buffer is drained, so a burst read in one system
// call leaves in one.
//
// nats.go does more per message for the same hop: its read loop hands
// each message to the subscription's own goroutine, decodes the headers
// into a map and encodes them again, and signals a flusher goroutine per
// publish. The tenancy ingest, which only moves a tenant's publishes to
// the stored subjects, uses this instead, and so do redrive runs, which
// read DLQ entries and publish them again with their header blocks
// filtered as bytes. A
// publisher that is not the read loop calls Flush when it has nothing
// more to send right away.
//
// Guarantees: handlers see a connection's messages in the order the
// server sent them, one at a time; publishes leave in the order they
// were made; a message the server sent before it processed an
// Unsubscribe still reaches the handler; a publish past the server's
// max_payload is refused here (ErrMaxPayload), never sent.
//
// It reconnects (to the URLs in turn) and subscribes again, in the order
// the subscriptions were first made (so one made last, such as the
// ingest's probe, shows the others are in place again); while it is
// disconnected, Publish returns ErrDisconnected. It speaks plain TCP, or
// TLS when Options.TLS is set (upgraded after the server's plaintext
// INFO, as the NATS protocol does; reads stay slices of the buffer over
// the TLS connection), and user JWT authentication only (what the
// platform's client port offers): a JWT and seed, or nats.go's callbacks
// (Options.UserJWT and Sign), so a connection can be opened as another
// one is.
package wire
