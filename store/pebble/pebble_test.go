package pebble_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
	"github.com/devmsg/devmsg/store/storetest"
)

func open(t testing.TB, dir string) *pebble.Store {
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t *testing.T) store.Store {
		s := open(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopen(t *testing.T) {
	storetest.RunReopenTests(t, func(t *testing.T, dir string) store.Store { return open(t, dir) })
}

// BenchmarkCreateMessageParallel measures synced message writes from many
// goroutines, which share fsyncs through Pebble's group commit.
func BenchmarkCreateMessageParallel(b *testing.B) {
	s := open(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	devs := make([]store.Device, 1000)
	for i := range devs {
		devs[i] = store.Device{Name: fmt.Sprintf("dev-%04d", i)}
	}
	if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := n.Add(1)
			m := store.Message{ID: id, AppKey: "app", DeviceName: devs[id%1000].Name, Body: "hello", State: store.StatePending}
			seq := &store.SeqEntry{Fingerprint: "f", ExpiresAt: time.Now().Add(time.Minute).UnixMilli()}
			if err := s.CreateMessage(ctx, m, id, seq); err != nil && err != store.ErrQueueFull {
				b.Fatal(err)
			}
		}
	})
}
