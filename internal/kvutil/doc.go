// Package kvutil is the platform's one way to bind a JetStream KV bucket
// and to list its keys.
//
// Guarantees:
//   - Open never changes a bucket that exists when it looks: it binds it as
//     is, whatever its config. Only when the lookup finds no bucket does it
//     create one with CreateOrUpdate, so a create racing with another
//     process's create of the same bucket succeeds: the bucket ends with
//     the config of the last of them, and an update JetStream refuses (a
//     different storage type, for one) is returned as an error.
//   - OpenKeep never updates a bucket's config: it creates the bucket with
//     CreateKeyValue when the lookup finds none, and when that create
//     fails (another process created the bucket first, with this config
//     or another) it binds the bucket if it exists then, else returns the
//     create's error.
//   - Lookup never creates: a missing bucket is nil with no error.
//   - Keys returns the keys matching a filter in key order, an empty
//     bucket as no keys and no error; a key written or deleted while it
//     lists may or may not be in the result.
//
// The package links no broker: it imports nats.go only, so client
// packages may use it.
package kvutil
