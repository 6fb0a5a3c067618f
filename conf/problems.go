package conf

import (
	"errors"
	"strings"

	"github.com/msgplatform/platform/internal/validate"
)

// problems collects what Load finds wrong: first the problems of reading
// (unknown keys, wrong types), then those of Validate. A value set by the
// environment or a flag says so, since the file does not show it.
type problems struct {
	list validate.Problems
	// decoded holds the keys with a read problem: Validate's verdict on
	// the value left in their place would only repeat it.
	decoded map[string]bool
	// source maps a key to the variable or flag that set it.
	source map[string]string
}

func newProblems() *problems {
	return &problems{decoded: map[string]bool{}, source: map[string]string{}}
}

// add records a read problem.
func (ps *problems) add(key, msg string) {
	ps.decoded[key] = true
	ps.list.Addf(key, "%s%s", msg, ps.from(key))
}

// addValidation records the problems of a Validate error, except those
// under a key that already has a read problem.
func (ps *problems) addValidation(err error) {
	var ve *validate.Error
	if !errors.As(err, &ve) {
		ps.list.Merge("", err)
		return
	}
	for _, p := range ve.Problems {
		if ps.covered(p.Key) {
			continue
		}
		ps.list.Addf(p.Key, "%s%s", p.Msg, ps.from(p.Key))
	}
}

func (ps *problems) covered(key string) bool {
	for k := range ps.decoded {
		if under(key, k) {
			return true
		}
	}
	return false
}

// from returns " (from PLATFORM_X)" when key was set by the environment
// or a flag.
func (ps *problems) from(key string) string {
	for k, src := range ps.source {
		if under(key, k) {
			return " (from " + src + ")"
		}
	}
	return ""
}

// under reports whether key is k or inside it.
func under(key, k string) bool {
	return key == k || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[")
}

// err returns every problem as one *validate.Error, naming file.
func (ps *problems) err(file string) error {
	var sentinel error = ErrInvalid
	if file != "" {
		sentinel = &fileInvalid{file: file}
	}
	return ps.list.Err(sentinel)
}

// fileInvalid is ErrInvalid naming the file.
type fileInvalid struct{ file string }

func (e *fileInvalid) Error() string { return "conf: " + e.file + ": invalid configuration" }
func (e *fileInvalid) Unwrap() error { return ErrInvalid }
