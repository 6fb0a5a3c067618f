package platform

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jsscan"
)

// APIPrefix is the JetStream API subject prefix js uses.
func APIPrefix(js jetstream.JetStream) string { return jsscan.APIPrefix(js) }
