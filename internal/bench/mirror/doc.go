// Package mirror measures cross-region mirroring on a temporary
// two-region fabric, residency guard and gate running as platformd runs
// them: mirror lag per event at a fixed publish rate, and the publish
// rate to a mirrored topic against a raw one in the same run.
package mirror
