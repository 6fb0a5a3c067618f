package redrive

// Control API subjects (relative to the control prefix platform.v1),
// served by platformd (internal/daemon/redrive.go).
const (
	SubjDLQList    = "dlq.list"
	SubjDLQEntries = "dlq.entries"
	SubjDLQShow    = "dlq.show"
	SubjDLQGroups  = "dlq.groups"

	SubjPreview = "redrive.preview" // dry run of a Request, nothing stored
	SubjRequest = "redrive.request"
	SubjApprove = "redrive.approve"
	SubjReject  = "redrive.reject"
	SubjRun     = "redrive.run"
	SubjPause   = "redrive.pause"
	SubjResume  = "redrive.resume"
	SubjCancel  = "redrive.cancel"
	SubjStatus  = "redrive.status"
	SubjList    = "redrive.list"
	SubjDryRun  = "redrive.dryrun" // dry run of a stored request
	SubjHistory = "redrive.history"
)

// Control API requests. Scope (in each request, `platformctl dlq|redrive
// --tenant T`) names the tenant whose account holds the DLQs; "" is the
// platform admin account. The control API is served in the PLATFORM
// account only, so every caller holds the admin credentials. A
// state-changing request may be signed by a user's .creds
// (internal/principal.Envelope around the request): platformd then takes
// the requester or actor from the verified user, not from the body, and a
// tenant's user may name its own tenant's scope only.
type (
	// ScopeRequest names a scope only (dlq.list).
	ScopeRequest struct {
		Scope string `json:"scope,omitempty"`
	}
	// ShowRequest names one DLQ entry.
	ShowRequest struct {
		Scope string `json:"scope,omitempty"`
		DLQ   string `json:"dlq"`
		Seq   uint64 `json:"seq"`
	}
	// Action approves, rejects, runs, pauses, resumes or cancels
	// one redrive. Actor is the name an unsigned request gives (recorded
	// as unauthenticated:<Actor>); a signed one's principal replaces it
	// (see Request.Requester).
	Action struct {
		Scope string `json:"scope,omitempty"`
		ID    string `json:"id"`
		Actor string `json:"actor"`
		Note  string `json:"note,omitempty"`
	}
	// IDRequest names one redrive.
	IDRequest struct {
		Scope string `json:"scope,omitempty"`
		ID    string `json:"id"`
	}
)
