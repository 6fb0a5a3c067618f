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

// Control API requests.
type (
	// ShowRequest names one DLQ entry.
	ShowRequest struct {
		DLQ string `json:"dlq"`
		Seq uint64 `json:"seq"`
	}
	// Action approves, rejects, runs, pauses, resumes or cancels
	// one redrive. Actor is the principal (see Request.Requester).
	Action struct {
		ID    string `json:"id"`
		Actor string `json:"actor"`
		Note  string `json:"note,omitempty"`
	}
	// IDRequest names one redrive.
	IDRequest struct {
		ID string `json:"id"`
	}
)
