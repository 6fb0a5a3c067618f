package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/msgplatform/platform/embeddednats"
)

// A nats CLI context (natscli's JSON in $XDG_CONFIG_HOME/nats/context,
// else ~/.config/nats/context): the fields platformctl sets. The CLI
// reads the creds file when it connects, so the context holds its path,
// never a secret; likewise the TLS files (CA, client certificate and
// key) are named by path.
type natsContext struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	Creds       string `json:"creds"`
	InboxPrefix string `json:"inbox_prefix"`
	CA          string `json:"ca,omitempty"`
	Cert        string `json:"cert,omitempty"`
	Key         string `json:"key,omitempty"`
}

// natsContextName is what natscli accepts as a context name (it is the
// file's base name).
var natsContextName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]*$`)

// natsContextPath checks name and returns the context's file path; it
// refuses an existing context unless force.
func natsContextPath(name string, force bool) (string, error) {
	if !natsContextName.MatchString(name) {
		return "", fmt.Errorf("--nats-context %q: a nats context name is letters, digits, '_', '-' and '.' (not first)", name)
	}
	root := os.Getenv("XDG_CONFIG_HOME")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("--nats-context: no home directory for ~/.config/nats/context: %w", err)
		}
		root = filepath.Join(home, ".config")
	}
	p := filepath.Join(root, "nats", "context", name+".json")
	if _, err := os.Stat(p); err == nil && !force {
		return "", fmt.Errorf("--nats-context %s exists (%s); pass --force to overwrite it", name, p)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return p, nil
}

// writeNatsContext saves c at path (0600, its directory 0700).
// Every file it names is made absolute, so the CLI finds it from any
// directory.
func writeNatsContext(path string, c natsContext) error {
	for _, f := range []*string{&c.Creds, &c.CA, &c.Cert, &c.Key} {
		if *f == "" {
			continue
		}
		abs, err := filepath.Abs(*f)
		if err != nil {
			return err
		}
		*f = abs
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return embeddednats.WriteFileAtomic(path, append(b, '\n'), 0o600)
}
