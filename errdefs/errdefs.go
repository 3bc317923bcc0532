package errdefs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// NotFoundError says that the Kind named ID does not exist: `device "x"
// not found`, `message 7 not found`.
type NotFoundError struct {
	// Kind is what was looked for: "app", "device", "message",
	// "dead letter".
	Kind string
	// ID names it: a string is quoted in the message, anything else
	// (a msgid) printed as is.
	ID any
}

func (e *NotFoundError) Error() string { return e.Kind + " " + render(e.ID) + " not found" }

// NotFound returns a *NotFoundError for the kind named id.
func NotFound(kind string, id any) error { return &NotFoundError{kind, id} }

// ConflictError says that a request cannot be carried out because of what
// is stored: a name already taken, a seq_no already used.
type ConflictError struct {
	// Kind and ID name the thing in conflict, as in NotFoundError.
	Kind string
	ID   any
	// Reason follows them in the message: "already exists".
	Reason string
}

func (e *ConflictError) Error() string { return e.Kind + " " + render(e.ID) + " " + e.Reason }

// Conflict returns a *ConflictError.
func Conflict(kind string, id any, reason string) error { return &ConflictError{kind, id, reason} }

// InvalidError says that a value given by the caller breaks a rule.
type InvalidError struct {
	// Field names the value as the caller spelt it: "name",
	// "properties[2].type".
	Field string
	// Message is the whole message, which names the field:
	// "name must be 1 to 64 bytes".
	Message string
}

func (e *InvalidError) Error() string { return e.Message }

// Invalid returns an *InvalidError for field whose message is the field
// followed by the formatted reason: Invalid("name", "must be 1 to %d
// bytes", 64).
func Invalid(field, format string, args ...any) error {
	return &InvalidError{field, field + " " + fmt.Sprintf(format, args...)}
}

func render(id any) string {
	if s, ok := id.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(id)
}

// Recorder keeps the error behind an HTTP answer for a caller in the same
// process: the answer carries only a code and a message, and a caller
// such as the console that must tell "not found" from other refusals
// reads the typed error here instead of matching text.
type Recorder struct {
	mu  sync.Mutex
	err error
}

// Err returns the error recorded last, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

type recorderKey struct{}

// WithRecorder returns a context carrying a new Recorder, and the Recorder.
func WithRecorder(ctx context.Context) (context.Context, *Recorder) {
	r := &Recorder{}
	return context.WithValue(ctx, recorderKey{}, r), r
}

// Record keeps err in ctx's Recorder, if it carries one.
func Record(ctx context.Context, err error) {
	if r, ok := ctx.Value(recorderKey{}).(*Recorder); ok {
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}
}
