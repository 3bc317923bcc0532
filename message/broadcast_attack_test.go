package message

// Attack tests (issue 15 outside tester). Each FAILS on the code it was
// written against and shows a broadcast contract violation of docs/api.md
// ("Broadcast") and DESIGN.md section 8.

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// broadcastMessages returns the app's messages of broadcast id.
func broadcastMessages(t *testing.T, st BroadcastStore, id int64) []store.Message {
	t.Helper()
	ms, err := st.ListMessages(context.Background(), "app", math.MaxInt64, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Message
	for _, m := range ms {
		if m.Broadcast == id {
			out = append(out, m)
		}
	}
	return out
}

// TestAttackBroadcastRecreatedDeviceIsNotATarget: a target deleted
// between the 200 and the fan-out, then created again with the same name
// (untagged), is a device created after the answer: docs/api.md says it
// is not a target. The fan-out goes by name only and gives the new
// device the message.
func TestAttackBroadcastRecreatedDeviceIsNotATarget(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	if _, err := f.st.UpdateDevice(ctx, "app", "dev-1", func(d *store.Device) error {
		d.Tags = []string{"lamp"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	br := NewBroadcaster(f.svc, f.st, FanoutConfig{Chunk: 1, Poll: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	b, err := br.Create(ctx, f.app, Target{Tag: "lamp"}, SendRequest{Body: "fw", TTL: 60}, 0, func(int64, int64) *store.SeqEntry { return nil })
	if err != nil || b.Targets != 1 {
		t.Fatalf("create: %+v %v", b, err)
	}
	// After the 200, before the fan-out: the device is deleted and a new
	// one, without the tag, takes its name.
	if err := f.st.DeleteDevice(ctx, "app", "dev-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "new", TimeCreate: time.Now().Unix() + 1}}); err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	eventually(t, "the broadcast to be done", func() bool {
		got, err := f.st.GetBroadcast(ctx, "app", b.ID)
		return err == nil && got.State == store.BroadcastDone
	})
	for _, m := range broadcastMessages(t, f.st, b.ID) {
		t.Errorf("the new, untagged %s created after the 200 got broadcast message %d (state %s); want none", m.DeviceName, m.ID, m.State)
	}
}
