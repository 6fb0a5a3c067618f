package tenancy

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// sealer encrypts account signing seeds before they enter the registry,
// with AES-256-GCM under a key derived (HKDF-SHA256) from the operator
// signing seed in trust.json. Reading the registry (any PLATFORM admin
// can) does not give a tenant's signing key; trust.json (0600 on each
// node) does.
type sealer struct{ aead cipher.AEAD }

func newSealer(operatorSigningSeed string) (*sealer, error) {
	key, err := hkdf.Key(sha256.New, []byte(operatorSigningSeed), nil, "msgplatform tenancy signing seed v1", 32)
	if err != nil {
		return nil, fmt.Errorf("tenancy: derive seal key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal encrypts plain; the account public key is bound as additional data
// so a sealed seed cannot be moved to another tenant's record.
func (s *sealer) seal(plain []byte, account string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(account)), nil
}

func (s *sealer) open(sealed []byte, account string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("tenancy: sealed seed too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(account))
	if err != nil {
		return nil, fmt.Errorf("tenancy: open signing seed of %s (different trust.json?): %w", account, err)
	}
	return plain, nil
}
