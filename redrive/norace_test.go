//go:build !race

package redrive

const raceEnabled = false
