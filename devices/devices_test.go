package devices_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// fakeStore keeps devices by name and logs the writes, in order.
type fakeStore struct {
	devices map[string]store.Device
	log     *[]string
}

func (f fakeStore) CreateDevices(_ context.Context, _ string, ds []store.Device) ([]error, error) {
	errs := make([]error, len(ds))
	for i, d := range ds {
		if _, ok := f.devices[d.Name]; ok {
			errs[i] = store.ErrAlreadyExists
			continue
		}
		f.devices[d.Name] = d
	}
	return errs, nil
}

func (f fakeStore) GetDevice(_ context.Context, _, name string) (store.Device, error) {
	d, ok := f.devices[name]
	if !ok {
		return d, store.ErrNotFound
	}
	return d, nil
}

func (f fakeStore) UpdateDevice(_ context.Context, _, name string, fn func(*store.Device) error) (store.Device, error) {
	d, ok := f.devices[name]
	if !ok {
		return d, store.ErrNotFound
	}
	if err := fn(&d); err != nil {
		return d, err
	}
	f.devices[name] = d
	*f.log = append(*f.log, "update")
	return d, nil
}

func (f fakeStore) DeleteDevice(_ context.Context, _, name string, _ ...store.Event) error {
	if _, ok := f.devices[name]; !ok {
		return store.ErrNotFound
	}
	delete(f.devices, name)
	*f.log = append(*f.log, "delete")
	return nil
}

type events struct{ log *[]string }

func (e events) Disabled(context.Context, string, string) { *e.log = append(*e.log, "disabled") }
func (e events) Deleted(context.Context, string, string) error {
	*e.log = append(*e.log, "deleted")
	return nil
}

func newService() (*devices.Service, fakeStore, *[]string) {
	log := &[]string{}
	st := fakeStore{devices: map[string]store.Device{}, log: log}
	return devices.NewService(st, events{log}), st, log
}

func TestCreate(t *testing.T) {
	svc, st, _ := newService()
	ctx := context.Background()
	if _, _, err := svc.Create(ctx, "app", []devices.NewDevice{{Name: "dev-1"}}); err != nil {
		t.Fatal(err)
	}
	created, errs, err := svc.Create(ctx, "app", []devices.NewDevice{{Name: "dev-1"}, {Name: "dev-2", Mark: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	var cf *errdefs.ConflictError
	if !errors.As(errs[0], &cf) || errs[0].Error() != `device name "dev-1" already exists` {
		t.Errorf("taken name: %v", errs[0])
	}
	if errs[1] != nil || len(created[1].Secret) != devices.SecretLen || st.devices["dev-2"].Mark != "m" || st.devices["dev-2"].Flag != store.FlagEnabled {
		t.Errorf("new device: %v %+v", errs[1], st.devices["dev-2"])
	}
}

func TestUpdateTellsOfDisabling(t *testing.T) {
	svc, st, log := newService()
	ctx := context.Background()
	st.devices["dev-1"] = store.Device{Name: "dev-1"}
	disabled := store.FlagDisabled
	for range 2 { // only the first disables
		if _, err := svc.Update(ctx, "app", "dev-1", devices.Change{Flag: &disabled}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"update", "disabled", "update"}; !slices.Equal(*log, want) {
		t.Errorf("steps %v, want %v", *log, want)
	}
	bad := 2
	var iv *errdefs.InvalidError
	if _, err := svc.Update(ctx, "app", "dev-1", devices.Change{Flag: &bad}); !errors.As(err, &iv) || iv.Field != "flag" {
		t.Errorf("flag 2: %v", err)
	}
}

func TestDelete(t *testing.T) {
	svc, st, log := newService()
	ctx := context.Background()
	st.devices["dev-1"] = store.Device{Name: "dev-1"}
	if err := svc.Delete(ctx, "app", "dev-1"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"update", "deleted", "delete"}; !slices.Equal(*log, want) {
		t.Errorf("steps %v, want %v", *log, want)
	}
	var nf *errdefs.NotFoundError
	if err := svc.Delete(ctx, "app", "dev-1"); !errors.As(err, &nf) || err.Error() != `device "dev-1" not found` {
		t.Errorf("delete again: %v", err)
	}
}
