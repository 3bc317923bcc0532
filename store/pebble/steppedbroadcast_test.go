package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestStepAfterCancelConflicts: the broadcast a step wrote is held for the
// next step, and a cancel in between (UpdateBroadcast) is seen: the next
// step conflicts and writes nothing. The steps before it add up.
func TestStepAfterCancelConflicts(t *testing.T) {
	ctx := context.Background()
	names := []string{"d-1", "d-2", "d-3"}
	s, must := openTestApp(t, names...)
	b := store.Broadcast{ID: 100, AppKey: "app", All: true, Body: "fw", TTL: 60, TimeCreate: 1, Targets: 3, Chunks: 3, State: store.BroadcastFanningOut}
	must(s.CreateBroadcast(ctx, b, [][]string{{"d-1"}, {"d-2"}, {"d-3"}}, 0, nil))
	step := func(chunk int) error {
		m := store.Message{ID: int64(101 + chunk), AppKey: "app", DeviceName: names[chunk], Body: "fw", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StatePending, Broadcast: 100}
		msgs := []store.BatchMessage{{Message: m, Full: m}}
		prepared, err := s.PrepareStep(ctx, "app", msgs, nil)
		must(err)
		_, err = s.CreateMessages(ctx, "app", msgs, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: chunk, Done: chunk == 2, Prepared: prepared})
		return err
	}
	must(step(0))
	must(step(1))
	got, err := s.GetBroadcast(ctx, "app", 100)
	must(err)
	if got.Chunk != 2 || got.Queued != 2 || got.FirstID != 101 || got.LastID != 102 {
		t.Fatalf("after two steps: chunk %d, queued %d, ids %d to %d; want 2, 2, 101 to 102", got.Chunk, got.Queued, got.FirstID, got.LastID)
	}
	_, err = s.UpdateBroadcast(ctx, "app", 100, func(b *store.Broadcast) error {
		b.State = store.BroadcastCancelled
		return nil
	})
	must(err)
	if err := step(2); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("a step after the cancel: %v, want ErrVersionConflict", err)
	}
	if _, err := s.GetMessage(ctx, "app", 103); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the step after the cancel stored its message: %v", err)
	}
	got, err = s.GetBroadcast(ctx, "app", 100)
	must(err)
	if got.State != store.BroadcastCancelled || got.Queued != 2 {
		t.Fatalf("after the cancel: %+v", got)
	}
}
