package pebble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

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

// The benchmarks measure synced writes as the REST API issues them: each
// op is one batch committed with fsync, from many goroutines at once, so
// their throughput is what Pebble's group commit makes of the disk. The
// sub-benchmark name is the number of writing goroutines; goroutines=1
// pays one fsync per op.

var writers = []int{1, 16, 64}

// parallel runs fn on n goroutines until b.N ops are done and reports ops/s.
func parallel(b *testing.B, n int, fn func(worker int, op int64)) {
	var ops, workers atomic.Int64
	if n == 1 {
		b.ResetTimer()
		for i := range b.N {
			fn(0, int64(i))
		}
	} else {
		// RunParallel starts SetParallelism × GOMAXPROCS goroutines.
		b.SetParallelism(max(1, n/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := int(workers.Add(1) - 1)
			for pb.Next() {
				fn(w, ops.Add(1))
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkCreateMessageParallel(b *testing.B) {
	for _, n := range writers {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			s := open(b, b.TempDir())
			defer s.Close()
			ctx := context.Background()
			// Enough devices that no queue reaches MaxPending: a full queue
			// is refused without a write and would flatter the numbers.
			ndev := b.N/(store.MaxPending/2) + 1
			names := make([]string, ndev)
			for i := 0; i < ndev; i += 1000 {
				devs := make([]store.Device, 0, 1000)
				for j := i; j < min(i+1000, ndev); j++ {
					names[j] = fmt.Sprintf("dev-%07d", j)
					devs = append(devs, store.Device{Name: names[j], Secret: "s"})
				}
				if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
					b.Fatal(err)
				}
			}
			body := string(make([]byte, 200))
			parallel(b, n, func(_ int, id int64) {
				m := store.Message{
					ID: id, AppKey: "app", DeviceName: names[id%int64(ndev)], Body: body, TTL: 86400,
					TimeCreate: 1, ExpireTime: 86401, State: store.StatePending,
					Records: []store.Record{{Type: store.RecordTargetValid, ChannelKey: "app", MsgID: fmt.Sprint(id)}},
				}
				seq := &store.SeqEntry{Fingerprint: "0123456789abcdef0123456789abcdef", Status: 200, Body: []byte(`{"msgid":1}`),
					ExpiresAt: time.Now().Add(15 * time.Minute).UnixMilli()}
				if err := s.CreateMessage(ctx, m, id, seq); err != nil {
					b.Error(err)
				}
			})
		})
	}
}

func BenchmarkSetDesiredParallel(b *testing.B) {
	for _, n := range writers {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			s := open(b, b.TempDir())
			defer s.Close()
			ctx := context.Background()
			// One device per goroutine, so no update meets a version conflict.
			nw := max(n, runtime.GOMAXPROCS(0)*max(1, n/runtime.GOMAXPROCS(0)))
			devs := make([]store.Device, nw)
			for i := range devs {
				devs[i] = store.Device{Name: fmt.Sprint("dev-", i), Secret: "s"}
			}
			if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
				b.Fatal(err)
			}
			versions := make([]int64, nw)
			for i := range versions {
				versions[i] = 1
			}
			parallel(b, n, func(w int, op int64) {
				u := store.DesiredUpdate{
					AppKey: "app", DeviceName: devs[w].Name, Version: versions[w], Time: time.Now().UnixMilli(),
					Properties: map[string]json.RawMessage{"temp": json.RawMessage("21.5"), "mode": json.RawMessage(`"eco"`)},
				}
				seq := &store.SeqEntry{Fingerprint: "0123456789abcdef0123456789abcdef", Status: 200, Body: []byte(`{"op_code":0}`),
					ExpiresAt: time.Now().Add(15 * time.Minute).UnixMilli()}
				if _, err := s.SetDesired(ctx, u, op, seq); err != nil {
					b.Error(err)
					return
				}
				versions[w]++
			})
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
