// Package control is the platform's control API over NATS: platformd serves
// it as a nats.go micro service named "platform" (so `nats micro ls` and
// `nats micro info platform` show it), and platformctl calls it.
//
// Requests and replies are JSON. A failed request replies with the micro
// error headers (Nats-Service-Error-Code, Nats-Service-Error) where the
// code says what kind of failure it was: 400 invalid input, 404 not found,
// 409 a conflicting change that was refused without being applied, 500
// anything else. The client maps codes back to the sentinel errors of this
// package, so callers can use errors.Is and map them to exit codes.
//
// The API is served on the platform admin account only; tenants cannot
// reach it.
package control
