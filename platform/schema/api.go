package schema

import "encoding/json"

// Control API subjects (relative to control.SubjectPrefix) and their
// request bodies. platformd serves them (internal/daemon/schema.go);
// platformctl schema calls them.
const (
	SubjRegister = "schema.register"
	SubjCheck    = "schema.check"
	SubjList     = "schema.list"
	SubjShow     = "schema.show"
	SubjMode     = "schema.mode"
)

// RegisterRequest registers a schema version; the reply is a Registered.
// A refusal is a 409 whose message names every rule broken.
type RegisterRequest struct {
	Subject string          `json:"subject"`
	Schema  json.RawMessage `json:"schema"`
	Mode    Mode            `json:"mode,omitempty"`
}

// CheckRequest checks a schema without registering it; the reply is a
// CheckResult (incompatibility is a result, not an error).
type CheckRequest struct {
	Subject string          `json:"subject"`
	Schema  json.RawMessage `json:"schema"`
	Mode    Mode            `json:"mode,omitempty"`
}

// ShowRequest asks for a subject; the reply is a ShowResponse.
type ShowRequest struct {
	Subject string `json:"subject"`
	// Version: 0 for the latest.
	Version int `json:"version,omitempty"`
}

// ShowResponse is a subject's mode and versions, and the one asked for.
type ShowResponse struct {
	Subject  string  `json:"subject"`
	Mode     Mode    `json:"mode"`
	Versions []int   `json:"versions"`
	Version  Version `json:"version"`
}

// ModeRequest sets a subject's mode; the reply is a SubjectInfo.
type ModeRequest struct {
	Subject string `json:"subject"`
	Mode    Mode   `json:"mode"`
}
