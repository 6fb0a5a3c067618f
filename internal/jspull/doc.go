// Package jspull is the JetStream pull protocol, written once for the
// platform's two clients that speak it themselves: the work-queue lanes of
// platform/consumer (over nats.go) and redrive's read path (over
// internal/wire). It holds what both must agree with the server on: the
// request subject and body, the status codes that end or keep a request,
// and the fields of a delivery's ack subject.
//
// Guarantee: both clients send the same request for the same batch and
// expiry, and read a status or an ack subject the same way, so a fix to
// the protocol lands in both.
//
// Consumer groups read through nats.go's Fetch, which speaks the same
// protocol; the platform's own clients exist because nats.go's give up on
// a request's inbox after its expiry (a late delivery then goes to nobody
// and waits out its AckWait) and do not let the owner choose when to ask.
package jspull
