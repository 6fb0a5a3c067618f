package validate

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	Key string // full dotted key, e.g. "topics.orders.partitions"
	Msg string // what is wrong and what was given
}

func (p Problem) String() string {
	if p.Key == "" {
		return p.Msg
	}
	return p.Key + ": " + p.Msg
}

// Problems accumulates Problem values. The zero value is ready to use.
type Problems struct {
	list []Problem
}

// Addf records a problem with key.
func (p *Problems) Addf(key, format string, args ...any) {
	p.list = append(p.list, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Merge adds the problems of err under prefix. err may be an *Error (its
// problems are re-keyed), another error (recorded as one problem at prefix)
// or nil (ignored).
func (p *Problems) Merge(prefix string, err error) {
	if err == nil {
		return
	}
	var e *Error
	if errors.As(err, &e) {
		for _, q := range e.Problems {
			p.list = append(p.list, Problem{Key: join(prefix, q.Key), Msg: q.Msg})
		}
		return
	}
	p.list = append(p.list, Problem{Key: prefix, Msg: err.Error()})
}

// Len reports how many problems were recorded.
func (p *Problems) Len() int { return len(p.list) }

// Err returns nil when there are no problems, otherwise an *Error holding
// all of them, which wraps sentinel (if not nil) for errors.Is.
func (p *Problems) Err(sentinel error) error {
	if len(p.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), p.list...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].Key < list[j].Key })
	return &Error{Problems: list, sentinel: sentinel}
}

// Error is a list of problems. Its message names each, one per line.
type Error struct {
	Problems []Problem
	sentinel error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.sentinel != nil {
		b.WriteString(e.sentinel.Error())
	} else {
		b.WriteString("invalid configuration")
	}
	fmt.Fprintf(&b, " (%d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap lets errors.Is match the sentinel.
func (e *Error) Unwrap() error { return e.sentinel }

// Has reports whether a problem with exactly key was recorded.
func (e *Error) Has(key string) bool {
	for _, p := range e.Problems {
		if p.Key == key {
			return true
		}
	}
	return false
}

func join(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	default:
		return prefix + "." + key
	}
}
