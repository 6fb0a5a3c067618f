package bench

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
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

// TempPebble opens a pebble database with QuietPebbleLogger in a new
// temporary directory; closeDB closes it and removes the directory.
func TempPebble() (db *pebble.DB, closeDB func(), err error) {
	dir, err := os.MkdirTemp("", "platformctl-bench-pebble-")
	if err != nil {
		return nil, nil, err
	}
	db, err = pebble.Open(dir, &pebble.Options{Logger: QuietPebbleLogger{}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}
