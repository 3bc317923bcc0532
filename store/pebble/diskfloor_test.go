package pebble

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// Under the free-space floor writes that add data fail with store.ErrFull
// (a *DiskFullError saying so) and reads and presence go on; above it
// they succeed again. Open refuses a directory under the floor.
func TestDiskFloor(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, WithMinFree(math.MaxUint64)); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Open under the floor: %v, want store.ErrFull", err)
	}
	s, err := Open(dir, WithMinFree(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	app := store.App{Key: "floor-app", Name: "floor", MasterSecret: "s"}
	if err := s.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDevices(ctx, app.Key, []store.Device{{AppKey: app.Key, Name: "dev-1", Secret: "x"}}); err != nil {
		t.Fatal(err)
	}

	setFloor(s, math.MaxUint64) // the disk "fills"
	var full *DiskFullError
	if err := s.DiskFull(); !errors.As(err, &full) {
		t.Fatalf("DiskFull() = %v under the floor", err)
	}
	_, err = s.CreateDevices(ctx, app.Key, []store.Device{{AppKey: app.Key, Name: "dev-2", Secret: "x"}})
	if !errors.Is(err, store.ErrFull) || !errors.As(err, &full) {
		t.Fatalf("CreateDevices under the floor: %v, want a *DiskFullError", err)
	}
	if err := s.CreateApp(ctx, store.App{Key: "floor-2", Name: "f2", MasterSecret: "s"}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("CreateApp under the floor: %v", err)
	}
	if _, err := s.AppendEvents(ctx, []store.Event{{AppKey: app.Key, Type: "device.up", DeviceName: "dev-1", Data: []byte(`{}`)}}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("AppendEvents under the floor: %v", err)
	}
	if _, err := s.GetDevice(ctx, app.Key, "dev-1"); err != nil {
		t.Fatalf("a read under the floor: %v", err)
	}
	if _, err := s.UpdateDevice(ctx, app.Key, "dev-1", func(d *store.Device) error { d.Status = 1; return nil }); err != nil {
		t.Fatalf("presence under the floor: %v", err)
	}
	if s.WritesRefused() != 3 {
		t.Errorf("WritesRefused() = %d, want 3", s.WritesRefused())
	}

	setFloor(s, 1) // space is back
	if err := s.DiskFull(); err != nil {
		t.Fatalf("DiskFull() = %v above the floor", err)
	}
	if _, err := s.CreateDevices(ctx, app.Key, []store.Device{{AppKey: app.Key, Name: "dev-2", Secret: "x"}}); err != nil {
		t.Fatalf("CreateDevices once space is back: %v", err)
	}
}

// setFloor moves the floor and measures against it.
func setFloor(s *Store, floor uint64) {
	s.disk.mu.Lock()
	s.disk.floor = floor
	s.disk.mu.Unlock()
	s.measure()
}
