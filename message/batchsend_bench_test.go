package message

import (
	"context"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// BenchmarkBatchSend is a batch send of 1000 offline devices on Pebble,
// Plan and Commit, as POST /msg/v1/msgs makes it. Run it with -benchtime
// of at most 900x: each device holds at most 1000 pending messages.
func BenchmarkBatchSend(b *testing.B) {
	ctx, app, svc, names := batchFixture(b, 1000)
	send := BatchSend{Devices: names, SendRequest: SendRequest{Body: "1764075000000000000", TTL: 3600}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p, err := svc.Plan(ctx, app, send)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Commit(ctx, p, int64(i+1), &store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: 1 << 50}); err != nil {
			b.Fatal(err)
		}
	}
}

// batchFixture opens a Pebble store with one app and n devices (dev-0000
// on), closed when tb ends, and a Service on it.
func batchFixture(tb testing.TB, n int) (context.Context, store.App, *Service, []string) {
	tb.Helper()
	st, err := pebble.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	ctx := context.Background()
	app := store.App{Key: "app", Name: "a"}
	if err := st.CreateApp(ctx, app); err != nil {
		tb.Fatal(err)
	}
	devs, names := make([]store.Device, n), make([]string, n)
	for i := range devs {
		names[i] = fmt.Sprintf("dev-%04d", i)
		devs[i] = store.Device{Name: names[i], Secret: "s"}
	}
	if _, err := st.CreateDevices(ctx, app.Key, devs); err != nil {
		tb.Fatal(err)
	}
	ids, _ := idgen.New(0)
	return ctx, app, NewService(st, ids, nil), names
}
