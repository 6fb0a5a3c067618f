package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/msgplatform/platform/internal/validate"
)

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("tlsconf: invalid TLS settings")

// Config is the TLS of one listener or one client. The zero value is no
// TLS.
type Config struct {
	// CertFile and KeyFile: this side's certificate and key (PEM). A
	// listener needs both; a client names them to present a certificate
	// (mTLS).
	CertFile string `mapstructure:"cert_file" json:"cert_file,omitempty"`
	KeyFile  string `mapstructure:"key_file" json:"key_file,omitempty"`
	// CAFile: the CA (PEM) that signs the other side's certificate. A
	// client verifies the server with it; a listener with Verify checks
	// client certificates with it.
	CAFile string `mapstructure:"ca_file" json:"ca_file,omitempty"`
	// Verify, on a listener: require a client certificate signed by
	// CAFile (mTLS).
	Verify bool `mapstructure:"verify" json:"verify,omitempty"`
}

// Enabled reports whether any TLS setting is made.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// ValidateServer adds to p, under key, what keeps c from serving TLS:
// a missing cert or key, an unreadable file, Verify without a CA.
func (c Config) ValidateServer(p *validate.Problems, key string) {
	if !c.Enabled() {
		if c.Verify {
			p.Addf(key+".verify", "needs %s.cert_file, %s.key_file and %s.ca_file", key, key, key)
		}
		return
	}
	if c.CertFile == "" {
		p.Addf(key+".cert_file", "is required when %s is set (the listener's certificate, PEM)", key)
	}
	if c.KeyFile == "" {
		p.Addf(key+".key_file", "is required when %s is set (the listener's private key, PEM)", key)
	}
	if c.Verify && c.CAFile == "" {
		p.Addf(key+".ca_file", "is required with %s.verify (the CA that signs client certificates)", key)
	}
	c.validateFiles(p, key)
}

// ValidateClient adds to p, under key, what keeps c from dialling TLS: a
// certificate without its key (or the reverse), an unreadable file.
func (c Config) ValidateClient(p *validate.Problems, key string) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		p.Addf(key, "cert_file and key_file go together (a client certificate and its key)")
	}
	c.validateFiles(p, key)
}

func (c Config) validateFiles(p *validate.Problems, key string) {
	for _, f := range []struct{ name, path string }{{"cert_file", c.CertFile}, {"key_file", c.KeyFile}, {"ca_file", c.CAFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.Addf(key+"."+f.name, "cannot be read: %v", err)
		}
	}
	if c.CertFile != "" && c.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			p.Addf(key, "cert_file and key_file are not a usable pair: %v", err)
		}
	}
	if _, err := c.pool(); err != nil {
		p.Addf(key+".ca_file", "%v", err)
	}
}

// keyPair loads CertFile and KeyFile; its error wraps ErrInvalid and
// names both files.
func (c Config) keyPair() (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: cert_file %s, key_file %s: %v", ErrInvalid, c.CertFile, c.KeyFile, err)
	}
	return cert, nil
}

// Server is the listener configuration: nil when c is not enabled.
func (c Config) Server() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cert, err := c.keyPair()
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if tc.ClientCAs, err = c.pool(); err != nil {
		return nil, err
	}
	if c.Verify {
		if tc.ClientCAs == nil {
			return nil, fmt.Errorf("%w: verify needs ca_file", ErrInvalid)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Client is the dialling configuration: nil when c is not enabled.
// serverName, when not empty, is the name the server's certificate must
// carry (else the host dialled).
func (c Config) Client(serverName string) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	var err error
	if tc.RootCAs, err = c.pool(); err != nil {
		return nil, err
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := c.keyPair()
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// pool is the CA pool of CAFile: nil without a CAFile.
func (c Config) pool() (*x509.CertPool, error) {
	if c.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%w: ca_file: %v", ErrInvalid, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: ca_file %s holds no PEM certificate", ErrInvalid, c.CAFile)
	}
	return pool, nil
}

// Peer is the configuration of a link whose two ends are both this side's
// nodes (NATS routes): the listener of Server, which also dials the other
// nodes, verifying their certificates against CAFile (the system pool
// otherwise) and presenting its own. nil when c is not enabled.
func (c Config) Peer() (*tls.Config, error) {
	tc, err := c.Server()
	if tc == nil || err != nil {
		return tc, err
	}
	tc.RootCAs = tc.ClientCAs
	return tc, nil
}

// Internal is the dialling configuration of the platform's connections to
// its own listeners, c being the listener's Config: it presents the
// listener's certificate (which a listener with Verify asks for), and
// accepts a server certificate that chains to CAFile whatever names it
// carries (the platform dials its nodes by the address they listen on,
// 0.0.0.0 or a container address, which their certificates need not
// name). Without CAFile it accepts the listener's own certificate, or one
// the system pool verifies for the host dialled. nil when c is not
// enabled.
func (c Config) Internal() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	own, err := c.keyPair()
	if err != nil {
		return nil, err
	}
	roots, err := c.pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{own},
		// The chain is verified by VerifyConnection, below, with or
		// without the host name.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyInternal(cs, roots, own)
		},
	}, nil
}

func verifyInternal(cs tls.ConnectionState, roots *x509.CertPool, own tls.Certificate) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the server presented no certificate", ErrInvalid)
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if roots == nil {
		if len(own.Certificate) > 0 && string(own.Certificate[0]) == string(leaf.Raw) {
			return nil
		}
		if cs.ServerName == "" {
			return fmt.Errorf("%w: no ca_file and no host name to verify the server's certificate for", ErrInvalid)
		}
		opts.DNSName = cs.ServerName
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("tlsconf: server certificate: %w", err)
	}
	return nil
}
