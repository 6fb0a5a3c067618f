//go:build race

package redrive

// raceEnabled: the race detector slows the send path several-fold, so
// rate assertions are skipped under it.
const raceEnabled = true
