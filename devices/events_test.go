package devices_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// logOf returns the app's event log as "type:device ..." and checks that
// every lifecycle event has the data {}.
func logOf(t *testing.T, st *memory.Store, app string) string {
	t.Helper()
	p, err := st.ReadEvents(context.Background(), store.EventQuery{AppKey: app, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range p.Events {
		if string(e.Data) != "{}" || e.AppKey != app || e.Time == 0 {
			t.Errorf("event %+v: want data {}, the app key and a time", e)
		}
		s = append(s, e.Type+":"+e.DeviceName)
	}
	return strings.Join(s, " ")
}

func TestLifecycleEvents(t *testing.T) {
	ctx := context.Background()
	const app = "app-1"
	st := memory.New()
	svc := devices.NewService(st, nil)
	flag := func(f int) devices.Change { return devices.Change{Flag: &f} }

	steps := []struct {
		name string
		do   func() error
		want string // the events this step adds
	}{
		{"create two", func() error {
			_, errs, err := svc.Create(ctx, app, []devices.NewDevice{{Name: "dev-0001"}, {Name: "dev-0002"}})
			return errors.Join(append(errs, err)...)
		}, "device.created:dev-0001 device.created:dev-0002"},
		{"create a taken name and a new one", func() error {
			_, errs, err := svc.Create(ctx, app, []devices.NewDevice{{Name: "dev-0001"}, {Name: "dev-0003"}})
			if err != nil || errs[0] == nil || errs[1] != nil {
				return errors.New("want a conflict for the first only")
			}
			return nil
		}, "device.created:dev-0003"},
		{"disable", func() error { _, err := svc.Update(ctx, app, "dev-0001", flag(store.FlagDisabled)); return err }, "device.disabled:dev-0001"},
		{"disable again: no change, no event", func() error { _, err := svc.Update(ctx, app, "dev-0001", flag(store.FlagDisabled)); return err }, ""},
		{"enable an enabled device", func() error { _, err := svc.Update(ctx, app, "dev-0002", flag(store.FlagEnabled)); return err }, ""},
		{"change the mark only", func() error {
			m := "new mark"
			_, err := svc.Update(ctx, app, "dev-0001", devices.Change{Mark: &m})
			return err
		}, ""},
		{"enable", func() error { _, err := svc.Update(ctx, app, "dev-0001", flag(store.FlagEnabled)); return err }, "device.enabled:dev-0001"},
		{"delete", func() error { return svc.Delete(ctx, app, "dev-0002") }, "device.deleted:dev-0002"},
		{"delete an enabled device: no disabled event on the way", func() error { return svc.Delete(ctx, app, "dev-0001") }, "device.deleted:dev-0001"},
	}
	var want []string
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.want != "" {
			want = append(want, s.want)
		}
		if got := logOf(t, st, app); got != strings.Join(want, " ") {
			t.Fatalf("after %s the log is\n %s\nwant\n %s", s.name, got, strings.Join(want, " "))
		}
	}
	if got := logOf(t, st, "other-app"); got != "" {
		t.Errorf("another app's log has %s", got)
	}
}

// failingWrites fails every device update after its fn ran, as a store
// whose write fails would.
type failingWrites struct{ *memory.Store }

var errWrite = errors.New("disk full")

func (f failingWrites) UpdateDevice(ctx context.Context, app, name string, fn func(*store.Device) error) (store.Device, error) {
	return f.Store.UpdateDevice(ctx, app, name, func(d *store.Device) error {
		if err := fn(d); err != nil {
			return err
		}
		return errWrite
	})
}

func TestLifecycleEventsNotWrittenWithoutTheChange(t *testing.T) {
	ctx := context.Background()
	const app = "app-1"
	st := memory.New()
	if _, _, err := devices.NewService(st, nil).Create(ctx, app, []devices.NewDevice{{Name: "dev-0001"}}); err != nil {
		t.Fatal(err)
	}
	svc := devices.NewService(failingWrites{st}, nil)
	disabled := store.FlagDisabled
	if _, err := svc.Update(ctx, app, "dev-0001", devices.Change{Flag: &disabled}); !errors.Is(err, errWrite) {
		t.Fatalf("update: %v, want the write's failure", err)
	}
	if err := svc.Delete(ctx, app, "dev-0001"); !errors.Is(err, errWrite) {
		t.Fatalf("delete: %v, want the write's failure", err)
	}
	if _, err := svc.Update(ctx, app, "no-such-dev", devices.Change{Flag: &disabled}); err == nil {
		t.Fatal("update of a missing device succeeded")
	}
	if err := devices.NewService(st, nil).Delete(ctx, app, "no-such-dev"); err == nil {
		t.Fatal("delete of a missing device succeeded")
	}
	if got := logOf(t, st, app); got != "device.created:dev-0001" {
		t.Errorf("failed writes left events: %s", got)
	}
}
