package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
)

// A plan is the reconciler's two-phase unit of work: every object is read
// and checked first (conflicts and missing references are collected, not
// returned one by one), and only a plan with no problems runs.
type plan struct {
	r *Reconciler
	o ApplyOptions

	conflicts validate.Problems // ErrConflict
	missing   validate.Problems // ErrNotFound
	readErr   error             // JetStream failed while reading state

	items []*planItem

	streams   map[string]*jetstream.StreamInfo              // nil entry: no such stream
	consumers map[string]map[string]*jetstream.ConsumerInfo // by stream, then name
}

// planItem is one object's change and the steps that make it.
type planItem struct {
	change Change
	steps  []func(context.Context) error
}

func (r *Reconciler) newPlan(o ApplyOptions) *plan {
	return &plan{
		r:         r,
		o:         o,
		streams:   map[string]*jetstream.StreamInfo{},
		consumers: map[string]map[string]*jetstream.ConsumerInfo{},
	}
}

func (p *plan) conflict(key, format string, args ...any) {
	p.conflicts.Addf(key, format, args...)
}

func (p *plan) add(it *planItem) {
	if len(it.steps) == 0 {
		it.change.Action = ActionUnchanged
		it.change.Details = nil
	}
	p.items = append(p.items, it)
}

// stream returns the stream's info, nil if it does not exist.
func (p *plan) stream(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	if info, ok := p.streams[name]; ok {
		return info, nil
	}
	var info *jetstream.StreamInfo
	err := p.r.do(ctx, "read stream "+name, func(ctx context.Context) error {
		s, err := p.r.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			info = nil
			return nil
		}
		if err != nil {
			return err
		}
		info = s.CachedInfo()
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.streams[name] = info
	return info, nil
}

// streamConsumers returns the consumers of an existing stream by name.
func (p *plan) streamConsumers(ctx context.Context, stream string) (map[string]*jetstream.ConsumerInfo, error) {
	if cs, ok := p.consumers[stream]; ok {
		return cs, nil
	}
	cs, err := p.r.listConsumers(ctx, stream)
	if err != nil {
		return nil, err
	}
	p.consumers[stream] = cs
	return cs, nil
}

// listConsumers reads every consumer of stream. The paged info listing
// leaves out consumers whose leader did not answer in time (during an
// election, or with a node down) and nats.go drops the server's list of
// those, so the names are listed too (from the meta layer's assignments,
// always complete) and the info of any name missing is read on its own.
func (r *Reconciler) listConsumers(ctx context.Context, stream string) (map[string]*jetstream.ConsumerInfo, error) {
	var (
		cs    map[string]*jetstream.ConsumerInfo
		names []string
	)
	err := r.do(ctx, "list consumers of "+stream, func(ctx context.Context) error {
		s, err := r.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		cs = map[string]*jetstream.ConsumerInfo{}
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			cs[ci.Name] = ci
		}
		if err := l.Err(); err != nil {
			return err
		}
		names = names[:0]
		nl := s.ConsumerNames(ctx)
		for n := range nl.Name() {
			names = append(names, n)
		}
		return nl.Err()
	})
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if cs[name] != nil {
			continue
		}
		err := r.do(ctx, "read consumer "+stream+"/"+name, func(ctx context.Context) error {
			c, err := r.js.Consumer(ctx, stream, name)
			if err != nil {
				return err
			}
			cs[name] = c.CachedInfo()
			return nil
		})
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, err
		}
	}
	return cs, nil
}

func (p *plan) failRead(err error) {
	if p.readErr == nil {
		p.readErr = err
	}
}

// err returns the plan's problems: read errors first (the plan is
// incomplete), then conflicts and missing references together.
func (p *plan) err() error {
	if p.readErr != nil {
		return p.readErr
	}
	return errors.Join(p.conflicts.Err(platform.ErrConflict), p.missing.Err(platform.ErrNotFound))
}

// run checks the plan and, unless it has problems or is a dry run,
// executes it.
func (p *plan) run(ctx context.Context) ([]Change, error) {
	if err := p.err(); err != nil {
		return nil, err
	}
	var changes []Change
	for _, it := range p.items {
		if p.o.DryRun {
			changes = append(changes, it.change)
			continue
		}
		for _, step := range it.steps {
			if err := step(ctx); err != nil {
				return changes, fmt.Errorf("platform: apply %s %s (%d of %d objects done): %w",
					it.change.Kind, it.change.Name, len(changes), len(p.items), err)
			}
		}
		if it.change.Action != ActionUnchanged {
			p.r.log.Info("platform: applied", "kind", it.change.Kind, "name", it.change.Name,
				"action", it.change.Action, "details", it.change.Details)
		}
		changes = append(changes, it.change)
	}
	return changes, nil
}
