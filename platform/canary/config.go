package canary

import (
	"time"

	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
)

// Config configures platformd's canary (the `canary:` section of
// its configuration).
type Config struct {
	// Interval is how often canaries are published (default 1m); 0 turns
	// the canary off.
	Interval time.Duration `mapstructure:"interval"`
	// Tolerance is the canary age past which a group is not processing
	// accepted work (exported as platform_canary_tolerance_seconds for the
	// PlatformCanaryMissing alert); 0 means 3 intervals.
	Tolerance time.Duration `mapstructure:"tolerance"`
}

// DefaultConfig returns the default: a canary every minute,
// tolerance 3 minutes.
func DefaultConfig() Config { return Config{Interval: time.Minute} }

// MinInterval is the shortest canary interval accepted.
const MinInterval = 10 * time.Millisecond

// Enabled reports whether canaries are published.
func (c Config) Enabled() bool { return c.Interval > 0 }

// EffectiveTolerance is Tolerance, or 3 intervals when it is 0.
func (c Config) EffectiveTolerance() time.Duration {
	if c.Tolerance > 0 {
		return c.Tolerance
	}
	return 3 * c.Interval
}

// Validate reports every problem with the canary configuration.
func (c Config) Validate() error {
	var p validate.Problems
	if c.Interval < 0 || (c.Interval > 0 && c.Interval < MinInterval) {
		p.Addf("interval", "must be 0 (off) or at least %s, got %s", MinInterval, c.Interval)
	}
	if c.Tolerance < 0 {
		p.Addf("tolerance", "must be >= 0 (0: 3 intervals), got %s", c.Tolerance)
	}
	if c.Tolerance > 0 && c.Interval > 0 && c.Tolerance <= c.Interval {
		p.Addf("tolerance", "must be longer than the interval (%s), or a healthy group's canary is reported missing between two canaries; got %s", c.Interval, c.Tolerance)
	}
	return p.Err(platform.ErrInvalidSpec)
}
