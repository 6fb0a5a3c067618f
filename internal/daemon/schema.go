package daemon

import (
	"context"
	"errors"
	"sync"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform/schema"
)

// schemaEndpoints are the schema registry operations of the control API.
// The registry bucket (platform-schemas, R = the durability replicas) is
// created on first use.
func (d *Daemon) schemaEndpoints() []control.Endpoint {
	var (
		once sync.Once
		reg  *schema.Registry
		err0 error
	)
	registry := func() (*schema.Registry, error) {
		once.Do(func() { reg, err0 = schema.New(d.js, schema.Config{Replicas: d.cfg.Durability().Replicas}) })
		return reg, err0
	}
	return []control.Endpoint{
		schemaEP("schema_register", schema.SubjRegister, func(ctx context.Context, r schema.RegisterRequest) (schema.Registered, error) {
			reg, err := registry()
			if err != nil {
				return schema.Registered{}, err
			}
			return reg.Register(ctx, r.Subject, r.Schema, schema.RegisterOptions{Mode: r.Mode})
		}),
		schemaEP("schema_check", schema.SubjCheck, func(ctx context.Context, r schema.CheckRequest) (schema.CheckResult, error) {
			reg, err := registry()
			if err != nil {
				return schema.CheckResult{}, err
			}
			return reg.Check(ctx, r.Subject, r.Schema, r.Mode)
		}),
		schemaEP("schema_list", schema.SubjList, func(ctx context.Context, _ struct{}) ([]schema.SubjectInfo, error) {
			reg, err := registry()
			if err != nil {
				return nil, err
			}
			return reg.List(ctx)
		}),
		schemaEP("schema_show", schema.SubjShow, func(ctx context.Context, r schema.ShowRequest) (schema.ShowResponse, error) {
			reg, err := registry()
			if err != nil {
				return schema.ShowResponse{}, err
			}
			s, err := reg.Subject(ctx, r.Subject)
			if err != nil {
				return schema.ShowResponse{}, err
			}
			v, err := reg.Get(ctx, r.Subject, r.Version)
			if err != nil {
				return schema.ShowResponse{}, err
			}
			out := schema.ShowResponse{Subject: s.Subject, Mode: s.Mode, Version: v}
			for _, x := range s.Versions {
				out.Versions = append(out.Versions, x.Version)
			}
			return out, nil
		}),
		schemaEP("schema_mode", schema.SubjMode, func(ctx context.Context, r schema.ModeRequest) (schema.SubjectInfo, error) {
			reg, err := registry()
			if err != nil {
				return schema.SubjectInfo{}, err
			}
			return reg.SetMode(ctx, r.Subject, r.Mode)
		}),
	}
}

// schemaEP is mappedEP with the schema registry's error kinds.
func schemaEP[Req, Resp any](name, subject string, fn func(ctx context.Context, req Req) (Resp, error)) control.Endpoint {
	return mappedEP(name, subject, schemaErr, fn)
}

// schemaErr maps registry errors onto the control API's kinds, keeping
// the registry's message (which names the rule broken).
func schemaErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schema.ErrInvalid):
		return kindErr{err, control.ErrInvalid}
	case errors.Is(err, schema.ErrNotFound):
		return kindErr{err, control.ErrNotFound}
	case errors.Is(err, schema.ErrIncompatible), errors.Is(err, schema.ErrConflict):
		return kindErr{err, control.ErrConflict}
	}
	return err
}

type kindErr struct{ err, kind error }

func (e kindErr) Error() string        { return e.err.Error() }
func (e kindErr) Unwrap() error        { return e.err }
func (e kindErr) Is(target error) bool { return target == e.kind }
