// Package gather is the platform's one scatter-gather: a request that
// several responders answer (every server for a $SYS request, every
// daemon for a platform one), its replies handed to the caller until
// enough of them counted, the replies stalled, or the wait ran out. It
// runs over orbit.go's natsext.RequestMany.
//
// Guarantees: the request is published once, with a reply inbox
// subscribed before it leaves; every reply that arrives within the
// bounds reaches fn, in arrival order, one at a time; Collect returns
// when fn has counted Options.Want replies, when no reply came for
// Options.Stall after the first, when Options.Wait has passed since the
// request, or when ctx ends, whichever is first; a count short of Want
// is the caller's to judge. A "no responders" status (nobody subscribed)
// ends it with ErrNoResponders.
package gather
