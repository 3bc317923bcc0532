package message

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TestFanoutYieldsToSingleSends checks that the fan-out runs at its
// yield rate while single sends are made, and at its full rate once they
// stop.
func TestFanoutYieldsToSingleSends(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	if _, err := f.st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-2", Secret: "s"}, {Name: "dev-3", Secret: "s"}, {Name: "dev-4", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	// One message a second while sends are made, a thousand otherwise.
	br := NewBroadcaster(f.svc, f.st, FanoutConfig{Rate: 1000, YieldRate: 1, Chunk: 1, Poll: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	f.send(t, 60)
	b, err := br.Create(ctx, f.app, Target{All: true}, SendRequest{Body: "all", TTL: 60}, 0, func(int64, int64) *store.SeqEntry { return nil })
	if err != nil || b.Targets != 4 {
		t.Fatalf("create: %+v %v", b, err)
	}
	for range 6 {
		time.Sleep(100 * time.Millisecond)
		f.send(t, 60)
	}
	got, err := f.st.GetBroadcast(ctx, "app", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Queued > 2 {
		t.Fatalf("%d of 4 queued in 0.6 s of single sends at a yield rate of 1/s", got.Queued)
	}
	// The sends stopped: the rest goes at the full rate, long before the
	// yield rate would have made it.
	eventually(t, "the broadcast to be done", func() bool {
		got, err := f.st.GetBroadcast(ctx, "app", b.ID)
		return err == nil && got.State == store.BroadcastDone && got.Queued == 4
	})
}

// TestBroadcastsShareTheFanout checks that a small broadcast of one app
// is not held back until another app's large one is done: broadcasts
// take turns chunk by chunk.
func TestBroadcastsShareTheFanout(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	var devs []store.Device
	for i := range 40 {
		devs = append(devs, store.Device{Name: fmt.Sprintf("big-%02d", i), Secret: "s"})
	}
	if _, err := f.st.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	other := store.App{Key: "other", Name: "o"}
	if err := f.st.CreateApp(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.CreateDevices(ctx, "other", []store.Device{{Name: "solo", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	// 20 messages a second, one device a chunk: the large broadcast takes
	// about 2 s.
	br := NewBroadcaster(f.svc, f.st, FanoutConfig{Rate: 20, Chunk: 1, Poll: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	none := func(int64, int64) *store.SeqEntry { return nil }
	big, err := br.Create(ctx, f.app, Target{All: true}, SendRequest{Body: "big", TTL: 60}, 0, none)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the large fan-out to start", func() bool {
		b, err := f.st.GetBroadcast(ctx, "app", big.ID)
		return err == nil && b.Queued > 0
	})
	small, err := br.Create(ctx, other, Target{All: true}, SendRequest{Body: "small", TTL: 60}, 0, none)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the small broadcast to be done", func() bool {
		b, err := f.st.GetBroadcast(ctx, "other", small.ID)
		return err == nil && b.State == store.BroadcastDone
	})
	b, err := f.st.GetBroadcast(ctx, "app", big.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != store.BroadcastFanningOut {
		t.Fatalf("the small broadcast was done only after the large one (%s, %d of 40 queued)", b.State, b.Queued)
	}
}
