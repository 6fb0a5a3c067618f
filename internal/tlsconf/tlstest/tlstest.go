package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/tlsconf"
)

// CA is a throw-away certificate authority.
type CA struct {
	Dir    string // where the files are
	CAFile string // the CA certificate (PEM)
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// New makes a CA in dir (created 0700 if missing).
func New(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "platform throw-away CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), cert: cert, key: key, serial: 1}
	if err := writePEM(ca.CAFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// NewT is New in t.TempDir(), failing t on error.
func NewT(t testing.TB) *CA {
	t.Helper()
	ca, err := New(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return ca
}

// Server issues a server certificate named name, valid for hosts (DNS
// names or IP addresses; 127.0.0.1, ::1 and localhost are always added),
// and returns a listener Config with the CA (Verify off).
func (ca *CA) Server(name string, hosts ...string) (tlsconf.Config, error) {
	hosts = append(hosts, "127.0.0.1", "::1", "localhost")
	return ca.issue(name, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// Client issues a client certificate with common name name and returns a
// client Config with the CA.
func (ca *CA) Client(name string) (tlsconf.Config, error) {
	return ca.issue(name, nil, x509.ExtKeyUsageClientAuth)
}

// ServerT and ClientT are Server and Client failing t on error.
func (ca *CA) ServerT(t testing.TB, name string, hosts ...string) tlsconf.Config {
	t.Helper()
	c, err := ca.Server(name, hosts...)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return c
}

// VerifyingServerT is ServerT with Verify on: the listener asks for a
// client certificate of the CA.
func (ca *CA) VerifyingServerT(t testing.TB, name string, hosts ...string) tlsconf.Config {
	t.Helper()
	c := ca.ServerT(t, name, hosts...)
	c.Verify = true
	return c
}

func (ca *CA) ClientT(t testing.TB, name string) tlsconf.Config {
	t.Helper()
	c, err := ca.Client(name)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return c
}

// Trust is a client Config that only verifies the server (no client
// certificate).
func (ca *CA) Trust() tlsconf.Config { return tlsconf.Config{CAFile: ca.CAFile} }

func (ca *CA) issue(name string, hosts []string, usage ...x509.ExtKeyUsage) (tlsconf.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tlsconf.Config{}, err
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tlsconf.Config{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tlsconf.Config{}, err
	}
	base := filepath.Join(ca.Dir, fmt.Sprintf("%s-%d", name, ca.serial))
	c := tlsconf.Config{CertFile: base + ".pem", KeyFile: base + "-key.pem", CAFile: ca.CAFile}
	if err := writePEM(c.CertFile, "CERTIFICATE", der, 0o644); err != nil {
		return tlsconf.Config{}, err
	}
	if err := writePEM(c.KeyFile, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return tlsconf.Config{}, err
	}
	return c, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
