package pebble

import (
	"context"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// TestPendingIDsFromMemory checks that PendingIDs answers a repeated read
// from memory, not from the database (whose scans step over the
// tombstones of delivered messages), and reads again once a write
// changed the queue.
func TestPendingIDsFromMemory(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	_, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "s"}})
	must(err)
	m := func(id int64) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60, ExpireTime: 1 << 40, State: store.StatePending}
	}
	must(s.CreateMessage(ctx, m(1), 0, nil))
	must(s.CreateMessage(ctx, m(2), 0, nil))
	ids, err := s.PendingIDs(ctx, "app", "dev-1", 10)
	if err != nil || !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("first read: %v %v", ids, err)
	}
	// Behind the store's back: a read from the database would see it.
	must(s.db.Delete(queueKey("app", "dev-1", 1), pebble.Sync))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("second read %v, want [1 2] from memory", ids)
	}
	must(s.CreateMessage(ctx, m(3), 0, nil))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{2, 3}) {
		t.Fatalf("after a send %v, want [2 3] read again", ids)
	}
	// A read limited to fewer than the queue holds serves only limits up
	// to what it read.
	must(s.CreateMessage(ctx, m(4), 0, nil))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 1); !slices.Equal(ids, []int64{2}) {
		t.Fatalf("limit 1: %v", ids)
	}
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{2, 3, 4}) {
		t.Fatalf("limit 10 after limit 1: %v", ids)
	}
}

// TestPendingCacheRace checks that a read that raced a change of the
// queue is not cached: it may have read the queue before the change.
func TestPendingCacheRace(t *testing.T) {
	var c pendingCache
	_, ok, gen := c.cachedIDs("app", "dev", 10)
	if ok {
		t.Fatal("ids cached before any read")
	}
	c.put("app", "dev", 3) // a write lands while the read is under way
	c.storeIDs("app", "dev", gen, []int64{1, 2}, 10)
	if ids, ok, _ := c.cachedIDs("app", "dev", 10); ok {
		t.Fatalf("a read that raced a write was cached: %v", ids)
	}
	_, _, gen = c.cachedIDs("app", "dev", 10)
	c.storeIDs("app", "dev", gen, []int64{1, 2, 3}, 10)
	if ids, ok, _ := c.cachedIDs("app", "dev", 10); !ok || !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("a read with no write meanwhile: %v %v", ids, ok)
	}
	c.drop("app", "dev")
	if _, ok, _ := c.cachedIDs("app", "dev", 10); ok {
		t.Fatal("ids cached after drop")
	}
}
