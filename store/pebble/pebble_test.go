package pebble_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
	"github.com/devmsg/devmsg/store/storetest"
)

func open(t testing.TB, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t *testing.T) store.Store {
		s := open(t, t.TempDir())
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		return s
	})
}

func TestReopen(t *testing.T) {
	storetest.RunReopenTests(t, func(t *testing.T, dir string) store.Store { return open(t, dir) })
}

// The benchmarks are storetest's, on Pebble: each op one batch committed
// with fsync, so their throughput is what group commit makes of the disk.

func BenchmarkCreateMessageParallel(b *testing.B) {
	for _, n := range storetest.Writers {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			s := open(b, b.TempDir())
			defer s.Close()
			storetest.BenchCreateMessage(b, s, n)
		})
	}
}

func BenchmarkSetDesiredParallel(b *testing.B) {
	for _, n := range storetest.Writers {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			s := open(b, b.TempDir())
			defer s.Close()
			storetest.BenchSetDesired(b, s, n)
		})
	}
}

// BenchmarkListDevicesMillion pages through an app of 1,000,000 devices
// the way the console does: 50 names after a cursor, and 50 under a
// name prefix. Creating the devices takes most of the run.
func BenchmarkListDevicesMillion(b *testing.B) {
	const total = 1_000_000
	s := open(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < total; i += 1000 {
		devs := make([]store.Device, 0, 1000)
		for j := i; j < i+1000; j++ {
			devs = append(devs, store.Device{Name: fmt.Sprintf("dev-%07d", j), Secret: "s"})
		}
		if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cursor", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i = (i + 7919) % total
			page, err := s.ListDevices(ctx, "app", "", fmt.Sprintf("dev-%07d", i), 50)
			if err != nil || len(page.Devices) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("prefix", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i = (i + 7919) % (total / 1000)
			page, err := s.ListDevices(ctx, "app", fmt.Sprintf("dev-%04d", i), "", 50)
			if err != nil || len(page.Devices) != 50 {
				b.Fatal(err, len(page.Devices))
			}
		}
	})
}

// BenchmarkAppendEventsParallel: one event per AppendEvents, as a QoS 1
// publish makes them; 100 goroutines is a hundred devices publishing.
func BenchmarkAppendEventsParallel(b *testing.B) {
	for _, n := range append(storetest.Writers, 100) {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			s := open(b, b.TempDir())
			defer s.Close()
			storetest.BenchAppendEvents(b, s, n)
		})
	}
}
