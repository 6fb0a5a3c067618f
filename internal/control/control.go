package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ServiceName and SubjectPrefix identify the control API.
const (
	ServiceName    = "platform"
	ServiceVersion = "0.1.0"
	SubjectPrefix  = "platform.v1"
)

// Error codes carried in the Nats-Service-Error-Code header.
const (
	CodeInvalid  = 400
	CodeNotFound = 404
	CodeConflict = 409
	CodeInternal = 500
)

// Sentinel errors returned by Call, matching the reply's error code.
var (
	ErrInvalid     = errors.New("control: invalid request")
	ErrNotFound    = errors.New("control: not found")
	ErrConflict    = errors.New("control: conflicting change refused")
	ErrInternal    = errors.New("control: server error")
	ErrUnavailable = errors.New("control: platformd control API not reachable")
)

// Classifier maps a handler error to a reply code.
type Classifier func(error) int

// Endpoint is one operation of the API.
type Endpoint struct {
	// Name is the micro endpoint name, e.g. "topic_apply".
	Name string
	// Subject is relative to SubjectPrefix, e.g. "topic.apply".
	Subject string
	// Handle decodes the request body, does the work and returns the
	// value to reply with as JSON.
	Handle func(ctx context.Context, body []byte) (any, error)
	// Timeout bounds this endpoint's requests instead of Serve's timeout
	// (0: Serve's). Long operations (a region failback) set it.
	Timeout time.Duration
}

// JSON adapts a typed function into an Endpoint handler. An empty body
// decodes as the zero Req.
func JSON[Req, Resp any](fn func(ctx context.Context, req Req) (Resp, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, body []byte) (any, error) {
		var req Req
		if len(body) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return nil, fmt.Errorf("%w: decode request: %v", ErrInvalid, err)
			}
		}
		return fn(ctx, req)
	}
}

// Serve registers endpoints as the "platform" micro service on nc.
// classify maps handler errors to codes (ErrInvalid etc. are recognised
// without it). timeout bounds each request's context (unless the endpoint sets its own).
func Serve(nc *nats.Conn, endpoints []Endpoint, classify Classifier, timeout time.Duration) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "messaging platform control API (topics, queues, groups, status)",
	})
	if err != nil {
		return nil, fmt.Errorf("control: add service: %w", err)
	}
	g := svc.AddGroup(SubjectPrefix)
	for _, ep := range endpoints {
		h, d := ep.Handle, timeout
		if ep.Timeout > 0 {
			d = ep.Timeout
		}
		err := g.AddEndpoint(ep.Name, micro.HandlerFunc(func(r micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			resp, err := h(ctx, r.Data())
			if err != nil {
				code := codeOf(err, classify)
				_ = r.Error(strconv.Itoa(code), err.Error(), nil)
				return
			}
			_ = r.RespondJSON(resp)
		}), micro.WithEndpointSubject(ep.Subject))
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("control: endpoint %s: %w", ep.Name, err)
		}
	}
	return svc, nil
}

func codeOf(err error, classify Classifier) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrConflict):
		return CodeConflict
	}
	if classify != nil {
		if c := classify(err); c != 0 {
			return c
		}
	}
	return CodeInternal
}

// Call sends req (JSON) to the endpoint at SubjectPrefix+"."+subject and
// decodes the reply into resp (which may be nil).
func Call(ctx context.Context, nc *nats.Conn, subject string, req, resp any) error {
	var body []byte
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return fmt.Errorf("control: encode request: %w", err)
		}
	}
	msg, err := nc.RequestWithContext(ctx, SubjectPrefix+"."+subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("%w (no responders on %s.%s: is platformd running, and are these admin credentials?)", ErrUnavailable, SubjectPrefix, subject)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("%w: %s timed out: %v", ErrUnavailable, subject, err)
		}
		return fmt.Errorf("control: %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		desc := msg.Header.Get(micro.ErrorHeader)
		n, _ := strconv.Atoi(code)
		switch n {
		case CodeInvalid:
			return &RemoteError{Code: n, Message: desc, kind: ErrInvalid}
		case CodeNotFound:
			return &RemoteError{Code: n, Message: desc, kind: ErrNotFound}
		case CodeConflict:
			return &RemoteError{Code: n, Message: desc, kind: ErrConflict}
		default:
			return &RemoteError{Code: n, Message: desc, kind: ErrInternal}
		}
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("control: decode %s reply: %w", subject, err)
	}
	return nil
}

// RemoteError is a failure reported by platformd. Its message is the
// server's own, which names what was wrong.
type RemoteError struct {
	Code    int
	Message string
	kind    error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap lets errors.Is match ErrInvalid, ErrNotFound, ErrConflict or
// ErrInternal.
func (e *RemoteError) Unwrap() error { return e.kind }
