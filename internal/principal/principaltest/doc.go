// Package principaltest mints users of an installation's platform account
// for tests of signed control requests: each user's .creds file is written
// 0600 and the broker accepts it, so a test signs as a real, authenticated
// principal rather than a name it made up.
package principaltest
