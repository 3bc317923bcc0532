package pebble

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// TestCountQueues: countQueues counts each named device's queue entries
// and no one else's: not a device whose name extends another's, not
// another app's, not entries deleted, whatever the order of the names
// and with a name given twice.
func TestCountQueues(t *testing.T) {
	s := openTest(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	b := s.db.NewBatch()
	add := func(app, dev string, n int) {
		for i := range n {
			must(b.Set(queueKey(app, dev, int64(100+i)), nil, nil))
		}
	}
	add("app", "d1", 3)
	add("app", "d10", 5)
	add("app", "d2", 1)
	add("app", "d4", 4)
	add("app2", "d3", 2)
	add("ap", "d1", 6)
	must(b.Commit(pebble.Sync))
	must(s.db.SingleDelete(queueKey("app", "d4", 101), pebble.Sync))
	must(s.db.Delete(queueKey("app", "d4", 102), pebble.Sync))

	names := []string{"d4", "d10", "d3", "d1", "d2", "d0", "d10", "d9"}
	want := []int64{2, 5, 0, 3, 1, 0, 5, 0}
	got := make([]int64, len(names))
	for i := range got {
		got[i] = -1
	}
	must(s.countQueues("app", names, func(i int, n int64) { got[i] = n }))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts of %v: %v, want %v", names, got, want)
	}
	for i, name := range names {
		s.pending.drop("app", name)
		n, err := s.pendingCount("app", name)
		must(err)
		if n != want[i] {
			t.Errorf("pendingCount(%s) = %d, want %d", name, n, want[i])
		}
	}
}

// TestNoCountKeys: sends and PUBACKs, single and batched, write no
// pending-count key (c/): the count is the queue's.
func TestNoCountKeys(t *testing.T) {
	s, must := openTestApp(t, "dev-1", "dev-2")
	ctx := context.Background()
	m := func(id int64, dev string) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: dev, Body: "b", TTL: 60, ExpireTime: 1 << 40, State: store.StatePending}
	}
	must(s.CreateMessage(ctx, m(1, "dev-1"), 0, nil))
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: m(2, "dev-1")}, {Message: m(3, "dev-2")}, {Message: m(4, "dev-2")}}, nil, nil)
	must(err)
	deliver := func(m *store.Message) error { m.State = store.StateDelivered; return nil }
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 1, Fn: deliver}, {AppKey: "app", ID: 3, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	_, err = s.UpdateMessage(ctx, "app", 2, deliver)
	must(err)
	must(s.scan([]byte(pCount), prefixEnd([]byte(pCount)), func(k, _ []byte) (bool, error) {
		return false, fmt.Errorf("a count key %q was written", k)
	}))
}

// TestCountKeysOfOlderStoreIgnored: a store written before counts were
// taken from the queues holds a c/ key per device. After a reopen, the
// queue-full check of every kind of send follows the queue, not those
// keys (here made wrong both ways), and deleting the device removes its
// key.
func TestCountKeysOfOlderStoreIgnored(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, err)
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	_, err = s.CreateDevices(ctx, "app", []store.Device{{Name: "full", Secret: "s"}, {Name: "few", Secret: "s"}})
	must(t, err)
	id := int64(0)
	m := func(dev string) store.Message {
		id++
		return store.Message{ID: id, AppKey: "app", DeviceName: dev, Body: "b", TTL: 60, ExpireTime: 1 << 40, State: store.StatePending}
	}
	var batch []store.BatchMessage
	for range store.MaxPending {
		batch = append(batch, store.BatchMessage{Message: m("full")})
	}
	_, err = s.CreateMessages(ctx, "app", batch, nil, nil)
	must(t, err)
	must(t, s.CreateMessage(ctx, m("few"), 0, nil))
	// What an older build kept, wrong both ways.
	must(t, s.db.Set(key(pCount, "app", "full"), be64(5), pebble.Sync))
	must(t, s.db.Set(key(pCount, "app", "few"), be64(store.MaxPending), pebble.Sync))
	must(t, s.Close())

	s, err = Open(dir)
	must(t, err)
	defer s.Close()
	if err := s.CreateMessage(ctx, m("full"), 0, nil); !errors.Is(err, store.ErrQueueFull) {
		t.Errorf("a send to the full queue: %v, want ErrQueueFull", err)
	}
	must(t, s.CreateMessage(ctx, m("few"), 0, nil))
	s.pending.drop("app", "full")
	s.pending.drop("app", "few")
	out, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: m("full")}, {Message: m("few")}}, nil, nil)
	must(t, err)
	if out[0] != store.BatchFull || out[1] != store.BatchStored {
		t.Errorf("batch outcomes %v, want [full stored] (%d %d)", out, store.BatchFull, store.BatchStored)
	}
	must(t, s.DeleteDevice(ctx, "app", "few"))
	if _, err := s.get(key(pCount, "app", "few")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the deleted device's count key: %v, want it gone", err)
	}
}
