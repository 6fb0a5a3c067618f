package redrive

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
)

// Error fingerprints group DLQ entries that failed for the same reason:
// the class and the reason with everything that varies per event (UUIDs,
// long hex ids, numbers) replaced by placeholders.
var (
	uuidRE   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	hexIDRE  = regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b(?:0x)?[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`)
	numberRE = regexp.MustCompile(`[0-9]+`)
	spaceRE  = regexp.MustCompile(`\s+`)
)

// maxMessage bounds a normalized message (reasons can carry whole stack
// traces).
const maxMessage = 240

// NormalizeMessage returns msg with per-event values replaced: UUIDs by
// <uuid>, hex ids of 8 or more characters mixing digits and letters by
// <hex>, digit runs by <n>; whitespace collapsed; at most 240 bytes.
func NormalizeMessage(msg string) string {
	s := uuidRE.ReplaceAllString(msg, "<uuid>")
	s = hexIDRE.ReplaceAllStringFunc(s, func(m string) string {
		if len(strings.TrimPrefix(m, "0x")) < 8 {
			return m
		}
		return "<hex>"
	})
	s = numberRE.ReplaceAllString(s, "<n>")
	s = strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
	if len(s) > maxMessage {
		s = s[:maxMessage]
	}
	return s
}

// Fingerprint returns the 12-hex-digit id of (class, normalized reason).
func Fingerprint(class, reason string) string {
	sum := sha256.Sum256([]byte(class + "\n" + NormalizeMessage(reason)))
	return hex.EncodeToString(sum[:6])
}

// largestFirst returns the values of byFP (keyed by fingerprint) by count,
// largest first, ties by fingerprint.
func largestFirst[T any](byFP map[string]*T, count func(*T) int) []T {
	fps := make([]string, 0, len(byFP))
	for fp := range byFP {
		fps = append(fps, fp)
	}
	sort.Slice(fps, func(i, j int) bool {
		if ci, cj := count(byFP[fps[i]]), count(byFP[fps[j]]); ci != cj {
			return ci > cj
		}
		return fps[i] < fps[j]
	})
	out := make([]T, len(fps))
	for i, fp := range fps {
		out[i] = *byFP[fp]
	}
	return out
}
