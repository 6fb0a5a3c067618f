package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/msgplatform/platform/platform"
)

// EventTypeHeader names an event's type (the registry subject) on the
// event itself; it overrides the topic's binding.
const EventTypeHeader = "Event-Type"

// VersionOf returns the schema version an event was validated against,
// stamped by a validating Publisher (ok false: not validated).
func VersionOf(h nats.Header) (int, bool) {
	if h == nil {
		return 0, false
	}
	v := h.Get(platform.SchemaVersionHeader)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Validator validates events against the registry before a Publisher
// sends them (platform.PublisherOptions.Validator). Validation is opt-in
// per topic: only topics bound to a subject (or events carrying
// EventTypeHeader) are validated, against the subject's latest version
// unless the event already names a version in SchemaVersionHeader. It
// keeps the subjects it needs in memory, updated by a watch on the
// registry bucket, so Validate does no I/O.
type Validator struct {
	reg    *Registry
	topics map[string]string
	// optIn is set by NewTopicValidator: only topics in required are
	// validated, and every event on them must be.
	optIn    bool
	required map[string]bool

	mu       sync.RWMutex
	subjects map[string]*Subject
	compiled map[schemaKey]*compiledSchema

	watcher jetstream.KeyWatcher
	done    chan struct{}
}

var _ platform.Validator = (*Validator)(nil)

// NewValidator returns a Validator for topics (topic -> event type). Start
// it before use.
func (r *Registry) NewValidator(topics map[string]string) *Validator {
	t := make(map[string]string, len(topics))
	for k, v := range topics {
		t[k] = v
	}
	return &Validator{reg: r, topics: t, subjects: map[string]*Subject{}, compiled: map[schemaKey]*compiledSchema{}}
}

// NewTopicValidator returns a Validator for the topics that opt in
// (TopicSpec.ValidateEvents, `validate: true`): an event on one of them is
// validated against its event type (header Event-Type, else the
// topic's event_type) and refused when it has none or does not conform;
// events on every other topic are published unchecked, whatever their
// headers. Start it before use.
func (r *Registry) NewTopicValidator(topics ...platform.TopicSpec) *Validator {
	bound := map[string]string{}
	v := &Validator{reg: r, topics: bound, optIn: true, required: map[string]bool{}, subjects: map[string]*Subject{}, compiled: map[schemaKey]*compiledSchema{}}
	for _, t := range topics {
		if !t.ValidateEvents {
			continue
		}
		v.required[t.Name] = true
		if t.EventType != "" {
			bound[t.Name] = t.EventType
		}
	}
	return v
}

// Start loads the registry and keeps watching it; it returns once the
// current state is loaded.
func (v *Validator) Start(ctx context.Context) error {
	kv, err := v.reg.bucket(ctx)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return fmt.Errorf("schema: watch registry: %w", err)
	}
	v.watcher, v.done = w, make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(v.done)
		loaded := false
		for e := range w.Updates() {
			if e == nil {
				if !loaded {
					loaded = true
					close(ready)
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				v.mu.Lock()
				delete(v.subjects, e.Key())
				v.mu.Unlock()
				continue
			}
			var s Subject
			if json.Unmarshal(e.Value(), &s) != nil {
				continue
			}
			v.mu.Lock()
			v.subjects[s.Subject] = &s
			v.mu.Unlock()
		}
		if !loaded {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		_ = w.Stop()
		return fmt.Errorf("schema: load registry: %w", ctx.Err())
	}
}

// Close stops the watch.
func (v *Validator) Close() error {
	if v.watcher == nil {
		return nil
	}
	err := v.watcher.Stop()
	<-v.done
	v.watcher = nil
	return err
}

// Validate checks ev against its subject's schema and returns the
// version it conforms to; 0 when the event is not to be validated.
func (v *Validator) Validate(topic string, ev *platform.Event) (int, error) {
	if v.optIn && !v.required[topic] {
		return 0, nil
	}
	subject := ev.Headers.Get(EventTypeHeader)
	if subject == "" {
		subject = v.topics[topic]
	}
	if subject == "" {
		if v.optIn {
			return 0, fmt.Errorf("%w: topic %s validates its events (validate: true) but neither the event (header %s) nor the topic (event_type) names an event type", ErrValidation, topic, EventTypeHeader)
		}
		return 0, nil
	}
	want := 0
	if s := ev.Headers.Get(platform.SchemaVersionHeader); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%w: %s header %q is not a version", ErrValidation, platform.SchemaVersionHeader, s)
		}
		want = n
	}
	cs, version, err := v.schema(subject, want)
	if err != nil {
		return 0, err
	}
	if cs.fast != nil && cs.fast.accepts(ev.Payload) {
		return version, nil
	}
	sch := cs.full
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ev.Payload))
	if err != nil {
		return 0, fmt.Errorf("%w: %s v%d: payload is not JSON: %v", ErrValidation, subject, version, err)
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return 0, fmt.Errorf("%w: %s v%d: %s", ErrValidation, subject, version, flatten(ve))
		}
		return 0, fmt.Errorf("%w: %s v%d: %v", ErrValidation, subject, version, err)
	}
	return version, nil
}

// schemaKey names one compiled version of a subject.
type schemaKey struct {
	subject string
	version int
}

// compiledSchema is one version, compiled once: full is the complete
// validator (it decides every refusal and its message), fast the
// allocation-free fast path when the schema allows one (fastpath.go).
type compiledSchema struct {
	full *jsonschema.Schema
	fast *fastSchema
}

// schema returns the compiled schema of subject at version (0: latest),
// compiling it on first use only.
func (v *Validator) schema(subject string, version int) (*compiledSchema, int, error) {
	v.mu.RLock()
	s := v.subjects[subject]
	if s != nil && version == 0 {
		version = len(s.Versions)
	}
	cs := v.compiled[schemaKey{subject, version}]
	v.mu.RUnlock()
	if cs != nil {
		return cs, version, nil
	}
	if s == nil || len(s.Versions) == 0 {
		return nil, 0, fmt.Errorf("%w: no schema is registered for %s (platformctl schema register %s --file ...)", ErrValidation, subject, subject)
	}
	if version > len(s.Versions) {
		return nil, 0, fmt.Errorf("%w: %s has versions 1..%d, not %d", ErrValidation, subject, len(s.Versions), version)
	}
	text := s.Versions[version-1].Schema
	full, err := compile(text)
	if err != nil {
		return nil, 0, err
	}
	cs = &compiledSchema{full: full, fast: compileFast(text)}
	v.mu.Lock()
	v.compiled[schemaKey{subject, version}] = cs
	v.mu.Unlock()
	return cs, version, nil
}

var printer = message.NewPrinter(language.English)

// flatten turns a validation error tree into one line naming each failing
// location.
func flatten(ve *jsonschema.ValidationError) string {
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + joinPtr(e.InstanceLocation)
			msgs = append(msgs, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(msgs) == 0 {
		return ve.Error()
	}
	return strings.Join(msgs, "; ")
}

func joinPtr(p []string) string { return strings.Join(p, "/") }
