package message

import (
	"context"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

func TestServiceNotFound(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	noSeq := func(int64) *store.SeqEntry { return nil }
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"send to unknown device", func() error {
			_, err := f.svc.SendTo(ctx, f.app, "dev-9", SendRequest{Body: "b", TTL: 60}, 0, noSeq)
			return err
		}, `device "dev-9" not found`},
		{"get unknown message", func() error { _, err := f.svc.Get(ctx, "app", 42); return err }, "message 42 not found"},
		{"retract unknown message", func() error { _, err := f.svc.Retract(ctx, "app", 42); return err }, "message 42 not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var nf *errdefs.NotFoundError
			if !errors.As(err, &nf) || err.Error() != tc.want {
				t.Fatalf("got %v, want a not-found error %q", err, tc.want)
			}
		})
	}
	m, err := f.svc.SendTo(ctx, f.app, "dev-1", SendRequest{Body: "b", TTL: 60}, 0, noSeq)
	if err != nil || m.DeviceName != "dev-1" || m.State != store.StatePending {
		t.Fatalf("send to dev-1: %+v %v", m, err)
	}
	if got, err := f.svc.Get(ctx, "app", m.ID); err != nil || got.ID != m.ID {
		t.Fatalf("get %d: %+v %v", m.ID, got, err)
	}
}
