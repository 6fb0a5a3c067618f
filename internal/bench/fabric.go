package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Remote is the platform at --server, as the command reaches it.
type Remote struct {
	// Connect opens a new connection as the command's user.
	Connect func() (*nats.Conn, error)
	// URLs are the client URLs of --server.
	URLs []string
	// ConnOptions are the options any other user's connection to URLs
	// needs (the command's TLS).
	ConnOptions func() ([]nats.Option, error)
	// Actor names the command's user in control-API requests.
	Actor string
}

// StartFabric starts an in-process fabric as platformd runs one: with the
// scheduler slots platformd gives itself (embeddednats.SetProcs), so an
// in-process figure is what platformd would show on this machine. The
// value and its reason go to stderr. Start waits at most a minute.
func StartFabric(ctx context.Context, cfg embeddednats.FabricConfig, trust *embeddednats.Trust) (*embeddednats.Fabric, error) {
	procs, why := embeddednats.SetProcs()
	fmt.Fprintf(os.Stderr, "bench: GOMAXPROCS %d (%s)\n", procs, why)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return embeddednats.StartFabric(sctx, cfg, trust)
}

// TempFabric starts a temporary 3-node fabric in dir (SyncAlways as sync
// says), with TLS on the client ports when srvTLS is set (a listener
// Config with its CA); its connections verify a TLS fabric against
// srvTLS.CAFile as a service's client does. stop closes it, waiting at
// most 10s.
func TempFabric(ctx context.Context, dir string, sync bool, srvTLS tlsconf.Config) (f *embeddednats.Fabric, stop func(), err error) {
	trust, err := embeddednats.NewTrust()
	if err != nil {
		return nil, nil, err
	}
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Port, cfg.ClusterPort, cfg.DataDir = -1, -1, dir
	cfg.Durability.SyncAlways = sync
	if srvTLS.Enabled() {
		cfg.TLS = srvTLS
		if trust.ClientTLS, err = (tlsconf.Config{CAFile: srvTLS.CAFile}).Client(""); err != nil {
			return nil, nil, err
		}
	}
	cfg.LameDuck = 200 * time.Millisecond
	if f, err = StartFabric(ctx, cfg, trust); err != nil {
		return nil, nil, err
	}
	return f, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(cctx)
	}, nil
}

// WithFabric starts a TempFabric in dir, runs fn on it and stops it.
func WithFabric(ctx context.Context, dir string, sync bool, srvTLS tlsconf.Config, fn func(*nats.Conn, *catalog.Reconciler) error) error {
	f, stop, err := TempFabric(ctx, dir, sync, srvTLS)
	if err != nil {
		return err
	}
	defer stop()
	nc, err := f.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return fn(nc, catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: 3}))
}

// Connect connects to remote, or with inProcess starts a temporary
// 3-node fabric (SyncAlways, the platform's default) and connects to it;
// the returned func disconnects and removes the fabric.
func Connect(ctx context.Context, remote Remote, inProcess bool) (*nats.Conn, func(), error) {
	if !inProcess {
		nc, err := remote.Connect()
		if err != nil {
			return nil, nil, err
		}
		return nc, nc.Close, nil
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-")
	if err != nil {
		return nil, nil, err
	}
	f, stop, err := TempFabric(ctx, dir, true, tlsconf.Config{})
	if err != nil {
		return nil, nil, err
	}
	nc, err := f.Connect(nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		stop()
		os.RemoveAll(dir)
	}, nil
}

// Setup connects (or starts an in-process fabric), opens JetStream (up
// to maxPending async publishes, at least 1024) and creates the bench
// topic (R3, 24 partitions); cleanup drops the topic and disconnects.
func Setup(ctx context.Context, remote Remote, inProcess bool, topic string, maxPending int) (*nats.Conn, jetstream.JetStream, func(), error) {
	nc, closeNC, err := Connect(ctx, remote, inProcess)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(2*maxPending, 1024)))
	if err != nil {
		closeNC()
		return nil, nil, nil, err
	}
	drop, err := createTopic(ctx, js, topic)
	if err != nil {
		closeNC()
		return nil, nil, nil, err
	}
	return nc, js, func() { drop(); closeNC() }, nil
}

// TopicSpec is a bench topic: partitions and replicas as given, events
// kept an hour, owned by the bench.
func TopicSpec(name string, partitions, replicas int) platform.TopicSpec {
	spec := platform.DefaultTopicSpec(name)
	spec.Partitions, spec.Replicas = partitions, replicas
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	spec.Owner = "platformctl-bench"
	return spec
}

// createTopic creates topic (R3, 24 partitions, owned by the bench); the
// returned func deletes its stream.
func createTopic(ctx context.Context, js jetstream.JetStream, name string) (func(), error) {
	spec := TopicSpec(name, 24, 3)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyTopic(actx, spec, catalog.ApplyOptions{AllowReducedReplicas: true}); err != nil {
		return nil, fmt.Errorf("create bench topic %s: %w", name, err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, platform.StreamName(name))
	}, nil
}

// Purge empties topic's stream.
func Purge(ctx context.Context, js jetstream.JetStream, topic string) error {
	s, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}
