package pebble

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// TestPreparedStep: a step written with PrepareStep's result takes the
// pending counts PrepareStep counted while their generation holds (a
// queue entry is added behind the store's back after PrepareStep, which
// fills both queues to store.MaxPending, and the step still stores its
// messages, counting from the prepared MaxPending-1), and caches only the
// messages and the pending counts of connected devices.
func TestPreparedStep(t *testing.T) {
	ctx := context.Background()
	s, must := openTestApp(t, "d-1", "d-2")
	b := store.Broadcast{ID: 100, AppKey: "app", All: true, Body: "fw", TTL: 60, TimeCreate: 1, Targets: 2, Chunks: 1, State: store.BroadcastFanningOut}
	must(s.CreateBroadcast(ctx, b, [][]string{{"d-1", "d-2"}}, 0, nil))
	// queue adds queue entries from..to-1 (msgids from 10,000, clear of
	// the step's), bare: the count comes from the queue entries alone.
	queue := func(name string, from, to int64) {
		b := s.db.NewBatch()
		for id := 10_000 + from; id < 10_000+to; id++ {
			must(b.Set(queueKey("app", name, id), nil, nil))
		}
		must(b.Commit(pebble.Sync))
	}
	for _, name := range []string{"d-1", "d-2"} {
		queue(name, 1, store.MaxPending)
		s.pending.drop("app", name)
	}
	var msgs []store.BatchMessage
	for i, dev := range []string{"d-1", "d-2"} {
		m := store.Message{ID: int64(101 + i), AppKey: "app", DeviceName: dev, Body: "fw", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StatePending, Broadcast: 100}
		msgs = append(msgs, store.BatchMessage{Message: m, Full: m})
	}
	prepared, err := s.PrepareStep(ctx, "app", msgs, []bool{false, true})
	must(err)
	queue("d-1", store.MaxPending, store.MaxPending+1)
	queue("d-2", store.MaxPending, store.MaxPending+1)
	epoch, _ := s.FlagEpoch()
	out, err := s.CreateMessages(ctx, "app", msgs, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0, Done: true, Epoch: epoch, EpochOK: true, Prepared: prepared})
	must(err)
	if out[0] != store.BatchStored || out[1] != store.BatchStored {
		t.Fatalf("outcomes %v, want both stored on the prepared counts", out)
	}
	if n, ok := s.pending.get("app", "d-1"); ok {
		t.Errorf("the offline d-1's count is cached (%d)", n)
	}
	if n, ok := s.pending.get("app", "d-2"); !ok || n != store.MaxPending {
		t.Errorf("the connected d-2's count cached %d %v, want %d: the prepared %d and the step's message", n, ok, store.MaxPending, store.MaxPending-1)
	}
	if s.msgs.get(101) != nil {
		t.Error("the message to the offline d-1 is cached")
	}
	if s.msgs.get(102) == nil {
		t.Error("the message to the connected d-2 is not cached")
	}
}

// TestPreparedStepOutcomesOtherThanStored: a step prepared (its batch
// filled with every message as pending) whose devices changed before the
// write (d-1 deleted, d-2's queue full) stores what a step written
// without PrepareStep would: nothing for d-1, the queue-full form for
// d-2, the pending message for d-3, and no queue entry for d-1 or d-2.
func TestPreparedStepOutcomesOtherThanStored(t *testing.T) {
	ctx := context.Background()
	s, must := openTestApp(t, "d-1", "d-2", "d-3")
	b := store.Broadcast{ID: 100, AppKey: "app", All: true, Body: "fw", TTL: 60, TimeCreate: 1, Targets: 3, Chunks: 1, State: store.BroadcastFanningOut}
	must(s.CreateBroadcast(ctx, b, [][]string{{"d-1", "d-2", "d-3"}}, 0, nil))
	var msgs []store.BatchMessage
	for i, dev := range []string{"d-1", "d-2", "d-3"} {
		m := store.Message{ID: int64(101 + i), AppKey: "app", DeviceName: dev, Body: "fw", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StatePending, Broadcast: 100}
		full := m
		full.State = store.StateFailed
		msgs = append(msgs, store.BatchMessage{Message: m, Full: full})
	}
	epoch, _ := s.FlagEpoch()
	prepared, err := s.PrepareStep(ctx, "app", msgs, nil)
	must(err)
	must(s.DeleteDevice(ctx, "app", "d-1"))
	// d-2's queue is filled behind the store's back: its count and its
	// entries, whichever the store goes by.
	full := s.db.NewBatch()
	must(full.Set(key(pCount, "app", "d-2"), be64(store.MaxPending), nil))
	for id := range int64(store.MaxPending) {
		must(full.Set(appendQueueKey(nil, "app", "d-2", 10_000+id), nil, nil))
	}
	must(full.Commit(pebble.Sync))
	s.pending.drop("app", "d-2")
	out, err := s.CreateMessages(ctx, "app", msgs, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0, Done: true, Epoch: epoch, EpochOK: true, Prepared: prepared})
	must(err)
	if want := []int{store.BatchGone, store.BatchFull, store.BatchStored}; !slices.Equal(out, want) {
		t.Fatalf("outcomes %v, want %v", out, want)
	}
	if _, err := s.GetMessage(ctx, "app", 101); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the deleted d-1's message: %v, want not found", err)
	}
	if m, err := s.GetMessage(ctx, "app", 102); err != nil || m.State != store.StateFailed {
		t.Errorf("d-2's message %+v %v, want its queue-full form", m, err)
	}
	if m, err := s.GetMessage(ctx, "app", 103); err != nil || m.State != store.StatePending {
		t.Errorf("d-3's message %+v %v, want pending", m, err)
	}
	for _, k := range [][]byte{appendQueueKey(nil, "app", "d-1", 101), appendQueueKey(nil, "app", "d-2", 102)} {
		if ok, err := s.exists(k); err != nil || ok {
			t.Errorf("queue entry %q: %v %v, want none", k, ok, err)
		}
	}
}
