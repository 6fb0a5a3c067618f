package tlsconf

import (
	"crypto/tls"
	"fmt"
	"os"

	"github.com/msgplatform/platform/internal/validate"
)

// Flags names the command-line flags that set a client Config's files.
type Flags struct{ CA, Cert, Key string }

// FlagClient is c.Client("") with every problem named by the flag (in f)
// that caused it: a certificate without its key (or the reverse), a file
// that cannot be read, then files that do not load together. Every error
// wraps ErrInvalid.
func (c Config) FlagClient(f Flags) (*tls.Config, error) {
	var p validate.Problems
	if (c.CertFile == "") != (c.KeyFile == "") {
		p.Addf(f.Cert, "and %s go together (a client certificate and its key)", f.Key)
	}
	for _, file := range []struct{ flag, path string }{{f.CA, c.CAFile}, {f.Cert, c.CertFile}, {f.Key, c.KeyFile}} {
		if file.path == "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			p.Addf(file.flag, "cannot be read: %v", err)
		}
	}
	if err := p.Err(ErrInvalid); err != nil {
		return nil, err
	}
	tc, err := c.Client("")
	if err != nil {
		return nil, fmt.Errorf("%s, %s, %s: %w", f.CA, f.Cert, f.Key, err)
	}
	return tc, nil
}
