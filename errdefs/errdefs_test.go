package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/errdefs"
)

func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"not found, string id", errdefs.NotFound("device", `dev-"1`), `device "dev-\"1" not found`},
		{"not found, numeric id", errdefs.NotFound("message", int64(7)), "message 7 not found"},
		{"conflict", errdefs.Conflict("seq_no", int64(5), "already used within 15 minutes"), "seq_no 5 already used within 15 minutes"},
		{"invalid", errdefs.Invalid("name", "must be 1 to %d bytes", 64), "name must be 1 to 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAsThroughWrapping(t *testing.T) {
	err := fmt.Errorf("load: %w", errdefs.NotFound("app", "k"))
	var nf *errdefs.NotFoundError
	if !errors.As(err, &nf) || nf.Kind != "app" || nf.ID != "k" {
		t.Fatalf("errors.As(%v) = %v, %+v", err, errors.As(err, &nf), nf)
	}
}

func TestRecorder(t *testing.T) {
	errdefs.Record(context.Background(), errors.New("nobody listens")) // no recorder: no effect
	ctx, rec := errdefs.WithRecorder(context.Background())
	if rec.Err() != nil {
		t.Fatal("new recorder holds an error")
	}
	want := errdefs.NotFound("device", "x")
	errdefs.Record(ctx, want)
	if rec.Err() != want {
		t.Fatalf("recorded %v, want %v", rec.Err(), want)
	}
}
