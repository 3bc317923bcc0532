package redis

import (
	"context"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestCancelDoneBroadcastIsSwept (found by an outside tester):
// docs/api.md says a broadcast that is done can be cancelled "to retract
// what is undelivered", so the cancelled, unswept broadcast must be in
// ActiveBroadcasts for the fan-out worker to sweep it. On Redis the done
// broadcast's index entry had been dropped and the cancel did not put it
// back: DELETE of a done 20,000-device broadcast left every message
// pending.
func TestCancelDoneBroadcastIsSwept(t *testing.T) {
	requireServer(t)
	ctx := context.Background()
	s := openTest(t)
	must(t, s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	b := store.Broadcast{ID: 10, AppKey: "app", All: true, Body: "b", TTL: 60, TimeCreate: 1, Targets: 1, Chunks: 1, State: store.BroadcastFanningOut}
	must(t, s.CreateBroadcast(ctx, b, [][]string{{"gone"}}, 0, nil))
	// The fan-out's one step (its target was deleted meanwhile) ends it.
	if _, err := s.CreateMessages(ctx, "app", nil, nil, &store.BroadcastStep{AppKey: "app", ID: 10, Chunk: 0, Done: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetBroadcast(ctx, "app", 10); err != nil || got.State != store.BroadcastDone {
		t.Fatalf("after its step: %+v %v, want done", got, err)
	}
	active, err := s.ActiveBroadcasts(ctx) // the worker's poll drops the done one
	if err != nil || len(active) != 0 {
		t.Fatalf("active: %+v %v, want none", active, err)
	}
	// DELETE /msg/v1/broadcast: Broadcaster.Cancel.
	if _, err := s.UpdateBroadcast(ctx, "app", 10, func(b *store.Broadcast) error {
		b.State, b.Swept = store.BroadcastCancelled, false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	active, err = s.ActiveBroadcasts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 || active[0].ID != 10 {
		t.Fatalf("active after cancelling the done broadcast: %+v; want it, so that its sweep retracts its messages", active)
	}
}
