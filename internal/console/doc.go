// Package console is the web console of dead-letter review and redrive,
// served by platformd under /console/ on its HTTP port: DLQs, entries,
// fingerprint groups, redrive requests with approve / reject / run /
// pause / resume / cancel, live progress and the audit history. Plain
// server-rendered HTML with its CSS and JS embedded; no build step.
//
// Guarantees:
//   - Identity is authenticated by the broker: a user signs in with their
//     NATS .creds, and the principal (alice@harbor-retail) comes from the
//     user JWT the server accepted, never from a form field. Four eyes
//     therefore means two different authenticated users.
//   - A tenant's user sees only that tenant's DLQs, requests and audit
//     records, and within it only what its own permissions allow
//     (redrive.Service.For): anything else is refused (403) saying what to
//     grant, and nothing is read or changed.
//   - A user who no longer checks out (revoked, expired, tenant suspended)
//     is signed out at their next request, and the action they posted is
//     not done.
//   - Sessions are signed HttpOnly, SameSite=Strict cookies; every
//     mutating request is a POST with a CSRF token bound to the session.
//   - Logout is installation-wide: an ended session is recorded in a
//     replicated KV bucket that every platformd reads on every request.
//   - Request bodies are bounded before anything reads them.
//
// Failures handled: a platformd that cannot read the ended-sessions record
// refuses the request (503) and keeps the cookie (fail closed); a logout
// whose record cannot be written ends the session locally and retries the
// record in the background.
//
// Detail: docs/design/console.md.
package console
