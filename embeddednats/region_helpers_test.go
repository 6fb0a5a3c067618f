package embeddednats_test

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

var errNotYet = errors.New("not yet")

func jsStream(name string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}}
}
