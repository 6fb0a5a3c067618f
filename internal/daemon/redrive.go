package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/redrive"
)

// startRedrive starts the redrive service: its KV bucket, and the
// adoption of runs whose runner (another platformd, or this one before a
// restart) went silent.
func (d *Daemon) startRedrive(ctx context.Context) error {
	cfg := redrive.DefaultConfig()
	cfg.Replicas = d.cfg.Durability().Replicas
	cfg.Logger = d.log
	s, err := redrive.New(d.js, cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	d.redrive = s
	d.reg.MustRegister(s.Collector())
	return nil
}

func (d *Daemon) stopRedrive(ctx context.Context) error {
	if d.redrive == nil {
		return nil
	}
	return d.redrive.Close(ctx)
}

// Redrive returns the redrive service (nil before Start).
func (d *Daemon) Redrive() *redrive.Service { return d.redrive }

// redriveErr maps redrive errors onto the control API's kinds. A
// four-eyes refusal is a 409 (refused, nothing changed) with its message.
func redriveErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redrive.ErrInvalid):
		return fmt.Errorf("%w: %w", control.ErrInvalid, err)
	case errors.Is(err, redrive.ErrNotFound):
		return fmt.Errorf("%w: %w", control.ErrNotFound, err)
	case errors.Is(err, redrive.ErrConflict), errors.Is(err, redrive.ErrForbidden):
		return refused{err}
	}
	return err
}

func rep[Req, Resp any](name, subject string, fn func(ctx context.Context, req Req) (Resp, error)) control.Endpoint {
	return control.Endpoint{Name: name, Subject: subject, Handle: control.JSON(func(ctx context.Context, r Req) (Resp, error) {
		resp, err := fn(ctx, r)
		return resp, redriveErr(err)
	})}
}

// redriveEndpoints are the DLQ browse and redrive operations.
func (d *Daemon) redriveEndpoints() []control.Endpoint {
	s := d.redrive
	if s == nil {
		return nil
	}
	action := func(name, subject string, fn func(ctx context.Context, id, actor, note string) (redrive.Status, error)) control.Endpoint {
		return rep(name, subject, func(ctx context.Context, r redrive.Action) (redrive.Status, error) {
			return fn(ctx, r.ID, r.Actor, r.Note)
		})
	}
	return []control.Endpoint{
		rep("dlq_list", redrive.SubjDLQList, func(ctx context.Context, _ struct{}) ([]redrive.DLQ, error) {
			return s.ListDLQs(ctx)
		}),
		rep("dlq_entries", redrive.SubjDLQEntries, func(ctx context.Context, f redrive.EntryFilter) ([]redrive.Entry, error) {
			return s.Entries(ctx, f)
		}),
		rep("dlq_show", redrive.SubjDLQShow, func(ctx context.Context, r redrive.ShowRequest) (redrive.Entry, error) {
			return s.Show(ctx, r.DLQ, r.Seq)
		}),
		rep("dlq_groups", redrive.SubjDLQGroups, func(ctx context.Context, f redrive.EntryFilter) ([]redrive.Group, error) {
			return s.Groups(ctx, f)
		}),
		rep("redrive_preview", redrive.SubjPreview, func(ctx context.Context, r redrive.Request) (redrive.Preview, error) {
			return s.Preview(ctx, r)
		}),
		rep("redrive_request", redrive.SubjRequest, func(ctx context.Context, r redrive.Request) (redrive.Status, error) {
			return s.Submit(ctx, r)
		}),
		action("redrive_approve", redrive.SubjApprove, s.Approve),
		action("redrive_reject", redrive.SubjReject, s.Reject),
		action("redrive_run", redrive.SubjRun, s.Run),
		action("redrive_pause", redrive.SubjPause, s.Pause),
		action("redrive_resume", redrive.SubjResume, s.Resume),
		action("redrive_cancel", redrive.SubjCancel, s.Cancel),
		rep("redrive_status", redrive.SubjStatus, func(ctx context.Context, r redrive.IDRequest) (redrive.Status, error) {
			return s.Get(ctx, r.ID)
		}),
		rep("redrive_list", redrive.SubjList, func(ctx context.Context, f redrive.ListFilter) ([]redrive.Status, error) {
			return s.List(ctx, f)
		}),
		rep("redrive_dryrun", redrive.SubjDryRun, func(ctx context.Context, r redrive.IDRequest) (redrive.Preview, error) {
			return s.DryRun(ctx, r.ID)
		}),
		rep("redrive_history", redrive.SubjHistory, func(ctx context.Context, f redrive.HistoryFilter) ([]redrive.AuditRecord, error) {
			return s.History(ctx, f)
		}),
	}
}
