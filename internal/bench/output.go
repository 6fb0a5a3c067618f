package bench

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// PrintLines writes lines to w, one a line.
func PrintLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// DiscardLogger is a logger that writes nothing: a component under bench
// logs nothing into the figures.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// QuietPebbleLogger is a pebble.Logger that drops all but fatal
// messages; a fatal message goes to stderr and exits.
type QuietPebbleLogger struct{}

func (QuietPebbleLogger) Infof(string, ...any)  {}
func (QuietPebbleLogger) Errorf(string, ...any) {}
func (QuietPebbleLogger) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...)
	os.Exit(1)
}
