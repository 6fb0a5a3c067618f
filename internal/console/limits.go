package console

import (
	"errors"
	"fmt"
	"net/http"
)

// Request body limits. Every request the console serves has its body
// bounded before anything reads it (Handler), and forms are parsed with
// that bound as their in-memory limit, so no part of a form is spooled
// to a temporary file.
const (
	// MaxLoginBytes bounds a sign-in (/console/login): a .creds file is
	// about 1 KiB.
	MaxLoginBytes = 64 << 10
	// MaxFormBytes bounds every other request: the largest form is a
	// redrive request listing DLQ sequences.
	MaxFormBytes = 4 << 20
)

// bounded caps r's body at MaxLoginBytes on the sign-in path and
// MaxFormBytes elsewhere; a handler reading past it gets an
// *http.MaxBytesError and the connection is closed after the response.
func bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := int64(MaxFormBytes)
		if r.URL.Path == Prefix+"login" {
			limit = MaxLoginBytes
		}
		if r.ContentLength > limit {
			http.Error(w, fmt.Sprintf("console: request body of %d bytes refused: at most %d bytes", r.ContentLength, limit), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		h.ServeHTTP(w, r)
	})
}

// formStatus is the status of a form that cannot be read: 413 when it
// is over the limit, else 400.
func formStatus(err error) int {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// formError says why a form cannot be read.
func formError(err error, limit int64) string {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return fmt.Sprintf("the request is larger than %d bytes", limit)
	}
	return err.Error()
}
