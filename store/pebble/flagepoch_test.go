package pebble_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestFlagEpochCoversAReadBeforeTheFlagWrite: the store's FlagEpoch
// promises that when the epoch after a write equals the epoch before a
// read of devices, no flag those devices had at the read has changed.
// A flag change bumps the epoch before its write becomes visible: a
// fan-out step that reads the epoch just after the bump and the device
// just before the write sees the old flag, and, as its CreateMessages
// waits for the device's stripe which the flag change holds to the end,
// finds the same epoch after its write. It then hands a message to a
// device disabled meanwhile (announce skips the recheck), and the
// message stays pending on a disabled device instead of failing 3003.
func TestFlagEpochCoversAReadBeforeTheFlagWrite(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	const rounds = 50
	var devs []store.Device
	for i := 0; i < rounds; i++ {
		devs = append(devs, store.Device{AppKey: "app", Name: fmt.Sprint("d", i), Flag: store.FlagEnabled})
	}
	if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rounds; i++ {
		name, flag := fmt.Sprint("d", i), store.FlagDisabled
		before, _ := s.FlagEpoch()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := s.UpdateDevice(ctx, "app", name, func(d *store.Device) error { d.Flag = flag; return nil }); err != nil {
				t.Error(err)
			}
		}()
		// Read as prepare does: the epoch, then the devices.
		var e1 uint64
		for e1 == before {
			e1, _ = s.FlagEpoch()
		}
		devs, err := s.GetDevices(ctx, "app", []string{name})
		if err != nil {
			t.Fatal(err)
		}
		<-done
		// The write (CreateMessages takes the stripe after the change).
		if e2, _ := s.FlagEpoch(); e2 == e1 && devs[0].Flag != flag {
			t.Fatalf("round %d: epoch %d before the read and after, yet the read saw flag %d and the flag is now %d",
				i, e1, devs[0].Flag, flag)
		}
	}
}

// TestFlagEpochCoversAReadBeforeTheDelete: the same for a deletion: a
// device read after the epoch moved but before the delete was visible
// must not leave the epoch unchanged after the delete.
func TestFlagEpochCoversAReadBeforeTheDelete(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	for i := 0; i < 50; i++ {
		if _, err := s.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "d", Flag: store.FlagEnabled}}); err != nil {
			t.Fatal(err)
		}
		before, _ := s.FlagEpoch()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := s.DeleteDevice(ctx, "app", "d"); err != nil {
				t.Error(err)
			}
		}()
		var e1 uint64
		for e1 == before {
			e1, _ = s.FlagEpoch()
		}
		devs, err := s.GetDevices(ctx, "app", []string{"d"})
		if err != nil {
			t.Fatal(err)
		}
		<-done
		if e2, _ := s.FlagEpoch(); e2 == e1 && len(devs) == 1 {
			t.Fatalf("round %d: epoch %d before the read and after, yet the read found the device the delete removed", i, e1)
		}
	}
}
