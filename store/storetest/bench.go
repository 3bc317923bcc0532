package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// The benchmarks measure writes as the REST API issues them, each op one
// durable write, from n goroutines at once, so every backend is measured
// on the same work. Writers are the goroutine counts backends run them
// with; goroutines=1 pays one sync per op.

// Writers is the goroutine counts of the backends' benchmarks.
var Writers = []int{1, 16, 64}

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

// BenchCreateMessage measures CreateMessage of pending messages with a
// seq_no record on an empty store s from n goroutines.
func BenchCreateMessage(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	// Enough devices that no queue reaches MaxPending: a full queue is
	// refused without a write and would flatter the numbers.
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
}

// BenchSetDesired measures SetDesired of two properties with a seq_no
// record on an empty store s from n goroutines, each on its own device so
// no update meets a version conflict.
func BenchSetDesired(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
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
}

// BenchAppendEvents measures AppendEvents of one telemetry event (a
// 100-byte payload, as an MQTT device publishes it) per op, from n
// goroutines, all to one app's log: the ordering of one log is what
// could serialise them.
func BenchAppendEvents(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	data := []byte(`{"topic":"up","qos":1,"payload":"` + strings.Repeat("x", 100) + `","encoding":"utf8"}`)
	parallel(b, n, func(w int, op int64) {
		e := store.Event{AppKey: "app", DeviceName: fmt.Sprint("dev-", w), Type: "device.up", Time: op, Data: data}
		if _, err := s.AppendEvents(ctx, []store.Event{e}); err != nil {
			b.Fatal(err)
		}
	})
}
