package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Errors. Every error the package returns wraps one of these.
var (
	// ErrInvalid: a malformed request (subject name, mode, schema text).
	ErrInvalid = errors.New("schema: invalid")
	// ErrNotFound: no such subject or version.
	ErrNotFound = errors.New("schema: not found")
	// ErrIncompatible: the schema breaks the subject's compatibility
	// mode; the error is an *IncompatibleError naming every rule broken.
	ErrIncompatible = errors.New("schema: incompatible")
	// ErrConflict: concurrent registrations kept winning the race for
	// the next version; retry.
	ErrConflict = errors.New("schema: concurrent change")
	// ErrValidation: an event does not conform to its schema.
	ErrValidation = errors.New("schema: event does not conform")
)

// Mode is a subject's compatibility mode, as in Confluent Schema Registry.
type Mode string

// Compatibility modes. Backward is the default.
const (
	ModeNone               Mode = "none"
	ModeBackward           Mode = "backward"
	ModeForward            Mode = "forward"
	ModeFull               Mode = "full"
	ModeBackwardTransitive Mode = "backward_transitive"
	ModeForwardTransitive  Mode = "forward_transitive"
	ModeFullTransitive     Mode = "full_transitive"
	DefaultMode                 = ModeBackward
)

// Modes lists every mode, in documentation order.
var Modes = []Mode{ModeNone, ModeBackward, ModeForward, ModeFull, ModeBackwardTransitive, ModeForwardTransitive, ModeFullTransitive}

// Validate reports whether m is a known mode.
func (m Mode) Validate() error {
	for _, k := range Modes {
		if m == k {
			return nil
		}
	}
	return fmt.Errorf("%w: mode %q: want one of none, backward, forward, full, backward_transitive, forward_transitive, full_transitive", ErrInvalid, string(m))
}

func (m Mode) backward() bool {
	return m == ModeBackward || m == ModeFull || m == ModeBackwardTransitive || m == ModeFullTransitive
}

func (m Mode) forward() bool {
	return m == ModeForward || m == ModeFull || m == ModeForwardTransitive || m == ModeFullTransitive
}

func (m Mode) transitive() bool {
	return m == ModeBackwardTransitive || m == ModeForwardTransitive || m == ModeFullTransitive
}

// MaxSchemaBytes bounds one schema's text. A subject's versions are stored
// together in one KV entry, which must fit the server's max payload (1 MiB
// by default).
const MaxSchemaBytes = 64 << 10

var subjectRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,99}$`)

// ValidateSubject checks an event type name (the registry's subject).
func ValidateSubject(s string) error {
	if !subjectRE.MatchString(s) {
		return fmt.Errorf("%w: subject %q: an event type name is a letter then up to 99 letters, digits, '_' or '-' (e.g. OrderPlaced)", ErrInvalid, s)
	}
	return nil
}

// Version is one registered, immutable schema version of a subject.
type Version struct {
	Subject     string          `json:"subject"`
	Version     int             `json:"version"`
	Schema      json.RawMessage `json:"schema"`
	Fingerprint string          `json:"fingerprint"`
	// Mode is the subject's mode when this version was registered.
	Mode       Mode      `json:"mode"`
	Registered time.Time `json:"registered"`
}

// Subject is an event type: its mode and its versions (1..n).
type Subject struct {
	Subject  string    `json:"subject"`
	Mode     Mode      `json:"mode"`
	Versions []Version `json:"versions"`
}

// Latest returns the newest version (ok false when none is registered).
func (s *Subject) Latest() (Version, bool) {
	if len(s.Versions) == 0 {
		return Version{}, false
	}
	return s.Versions[len(s.Versions)-1], true
}

// SubjectInfo summarises a subject for listings.
type SubjectInfo struct {
	Subject  string `json:"subject"`
	Mode     Mode   `json:"mode"`
	Latest   int    `json:"latest"`
	Versions int    `json:"versions"`
}

// canonical parses a schema text, checks it compiles as a JSON Schema, and
// returns its canonical form (sorted keys, no insignificant space), its
// decoded value and its fingerprint.
func canonical(text []byte) (json.RawMessage, any, string, error) {
	if len(bytes.TrimSpace(text)) == 0 {
		return nil, nil, "", fmt.Errorf("%w: empty schema", ErrInvalid)
	}
	if len(text) > MaxSchemaBytes {
		return nil, nil, "", fmt.Errorf("%w: schema is %d bytes, the limit is %d", ErrInvalid, len(text), MaxSchemaBytes)
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(text))
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, "", fmt.Errorf("%w: schema is not JSON: %v", ErrInvalid, err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, nil, "", fmt.Errorf("%w: a JSON Schema is an object or a boolean, got %T", ErrInvalid, doc)
	}
	canon, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := compile(canon); err != nil {
		return nil, nil, "", err
	}
	sum := sha256.Sum256(canon)
	return canon, doc, hex.EncodeToString(sum[:8]), nil
}

// noLoader refuses every external reference: a schema registered on the
// server must not make it read files or fetch URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %s is not supported: inline it under $defs", url)
}

// compile compiles a canonical schema text for validation.
func compile(canon []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
	if err != nil {
		return nil, fmt.Errorf("%w: schema is not JSON: %v", ErrInvalid, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "mem:///schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: not a valid JSON Schema: %v", ErrInvalid, err)
	}
	return sch, nil
}
