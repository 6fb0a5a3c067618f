package embeddednats

import (
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// startWatch is the server's logger while it runs (wrapping the stderr
// logger when Config.Log is set, else discarding): it keeps the first
// fatal message, so Launch can say why a server that will never accept
// clients failed instead of waiting out ReadyTimeout. nats-server
// reports a failed start only through its logger: a client or cluster
// listener that cannot bind (its port taken after probePorts checked
// it, by another process), JetStream that cannot start, a resolver
// that cannot open. Its Fatalf is logged as an error and does not exit
// the process (the server returns after it, as it does with no logger):
// the embedding program decides what a failed node means.
type startWatch struct {
	server.Logger // the stderr logger, or Discard

	mu    sync.Mutex
	fatal string
}

func (w *startWatch) failure() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

func (w *startWatch) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	w.mu.Lock()
	if w.fatal == "" {
		w.fatal = msg
	}
	w.mu.Unlock()
	w.Errorf("%s", msg)
}

// Discard is a nats-server logger that drops every line: the logger of a
// node without Config.Log.
type Discard struct{}

var _ server.Logger = Discard{}

func (Discard) Noticef(string, ...any) {}
func (Discard) Warnf(string, ...any)   {}
func (Discard) Fatalf(string, ...any)  {}
func (Discard) Errorf(string, ...any)  {}
func (Discard) Debugf(string, ...any)  {}
func (Discard) Tracef(string, ...any)  {}

// watchStart installs a startWatch on s (before s.Start). With log set,
// the server's own stderr logger (ConfigureLogger; no log file is
// configured, so replacing it closes nothing) is wrapped.
func watchStart(s *server.Server, opts *server.Options, log bool) *startWatch {
	w := &startWatch{Logger: Discard{}}
	if log {
		s.ConfigureLogger()
		w.Logger = s.Logger()
	}
	s.SetLoggerV2(w, opts.Debug, opts.Trace, opts.TraceVerbose)
	return w
}

// startError is Launch's error for a server that logged a fatal message
// while starting: ErrPortInUse when a listener's port was taken (callers
// that picked free ports try others), else ErrNotReady.
func startError(name, fatal string) error {
	if strings.Contains(fatal, "address already in use") {
		return fmt.Errorf("%w: %s: %s", ErrPortInUse, name, fatal)
	}
	return fmt.Errorf("%w: %s: %s", ErrNotReady, name, fatal)
}
