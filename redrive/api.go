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
// account only, so every caller is a platform operator and may name any
// scope; a tenant's own users reach DLQs through the web console, scoped
// to their authenticated account.
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
	// one redrive. Actor is the principal (see Request.Requester).
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
