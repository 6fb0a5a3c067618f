package tenancy

import (
	"context"
	"fmt"
	"strings"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// checkObjectName refuses names that would reach into the stored
// namespace of the tenant's account.
func checkObjectName(kind, name string) error {
	if name == storedPrefix || strings.HasPrefix(name, storedPrefix+".") {
		return fmt.Errorf("%w: %s %q: names starting with %q are reserved", ErrInvalid, kind, name, storedPrefix)
	}
	if strings.Count(name, ".") > 2 {
		return fmt.Errorf("%w: %s %q: a tenant's object names have at most 3 tokens", ErrInvalid, kind, name)
	}
	return nil
}

// ApplyTopic creates or updates a topic in the tenant's account (stored as
// StoredName(spec.Name)) and starts taking publishes to spec.Name.<key>.
func (m *Manager) ApplyTopic(ctx context.Context, actor, tenant string, spec platform.TopicSpec, o catalog.ApplyOptions) (catalog.Change, error) {
	if spec.Replicas == 0 {
		spec.Replicas = m.cfg.Replicas
	}
	if err := spec.Validate(); err != nil {
		return catalog.Change{}, err
	}
	if err := checkObjectName("topic", spec.Name); err != nil {
		return catalog.Change{}, err
	}
	stored := spec
	stored.Name = StoredName(spec.Name)
	return m.applyObject(ctx, actor, tenant, "topic.apply", spec.Name, o, func(t *Tenant, rt *runtime) (catalog.Change, error) {
		if t.Queues[spec.Name] {
			return catalog.Change{}, fmt.Errorf("%w: tenant %s has a queue named %s", ErrConflict, tenant, spec.Name)
		}
		ch, err := rt.rec.ApplyTopic(ctx, stored, o)
		if err != nil || o.DryRun {
			return ch, err
		}
		t.Topics[spec.Name] = spec.Partitions
		return ch, rt.in.subscribe(spec.Name + ".*")
	})
}

// ApplyQueue creates or updates a queue in the tenant's account.
func (m *Manager) ApplyQueue(ctx context.Context, actor, tenant string, spec platform.QueueSpec, o catalog.ApplyOptions) (catalog.Change, error) {
	if spec.Replicas == 0 {
		spec.Replicas = m.cfg.Replicas
	}
	if err := spec.Validate(); err != nil {
		return catalog.Change{}, err
	}
	if err := checkObjectName("queue", spec.Name); err != nil {
		return catalog.Change{}, err
	}
	stored := spec
	stored.Name = StoredName(spec.Name)
	return m.applyObject(ctx, actor, tenant, "queue.apply", spec.Name, o, func(t *Tenant, rt *runtime) (catalog.Change, error) {
		if t.Topics[spec.Name] > 0 {
			return catalog.Change{}, fmt.Errorf("%w: tenant %s has a topic named %s", ErrConflict, tenant, spec.Name)
		}
		ch, err := rt.rec.ApplyQueue(ctx, stored, o)
		if err != nil || o.DryRun {
			return ch, err
		}
		t.Queues[spec.Name] = true
		return ch, rt.in.subscribe(spec.Name + ".>")
	})
}

// ApplyGroup creates or updates a consumer group on one of the tenant's
// topics.
func (m *Manager) ApplyGroup(ctx context.Context, actor, tenant string, spec platform.GroupSpec, o catalog.ApplyOptions) (catalog.Change, error) {
	if err := spec.Validate(); err != nil {
		return catalog.Change{}, err
	}
	stored := spec
	stored.Topic = StoredName(spec.Topic)
	return m.applyObject(ctx, actor, tenant, "group.apply", spec.Name, o, func(t *Tenant, rt *runtime) (catalog.Change, error) {
		if t.Topics[spec.Topic] == 0 {
			return catalog.Change{}, fmt.Errorf("%w: tenant %s has no topic %q", ErrNotFound, tenant, spec.Topic)
		}
		ch, err := rt.rec.ApplyGroup(ctx, stored, o)
		if err != nil || o.DryRun {
			return ch, err
		}
		t.Groups[spec.Name] = spec.Topic
		return ch, nil
	})
}

func (m *Manager) applyObject(ctx context.Context, actor, tenant, action, name string, o catalog.ApplyOptions,
	apply func(t *Tenant, rt *runtime) (catalog.Change, error)) (catalog.Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ch catalog.Change
	_, err := m.change(ctx, actor, action, tenant, false, func(t *Tenant) (string, error) {
		rt, err := m.runtimeOf(t)
		if err != nil {
			return "", err
		}
		if t.Topics == nil {
			t.Topics = map[string]int{}
		}
		if t.Queues == nil {
			t.Queues = map[string]bool{}
		}
		if t.Groups == nil {
			t.Groups = map[string]string{}
		}
		ch, err = apply(t, rt)
		ch.Name = name
		if err == nil && o.DryRun {
			return "", errUnchanged
		}
		return name, err
	})
	if err == errUnchanged {
		err = nil
	}
	return ch, err
}
