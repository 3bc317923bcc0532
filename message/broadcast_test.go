package message

import (
	"context"
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
