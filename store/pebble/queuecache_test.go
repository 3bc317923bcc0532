package pebble

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// TestPendingIDsFromMemory checks that PendingIDs answers from memory,
// not from the database (whose scans step over the tombstones of
// delivered messages), also after the store's own writes changed the
// queue: they bring the cached ids up to date rather than dropping them.
func TestPendingIDsFromMemory(t *testing.T) {
	s, must := openTestApp(t, "dev-1")
	ctx := context.Background()
	m := func(id int64) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60, ExpireTime: 1 << 40, State: store.StatePending}
	}
	must(s.CreateMessage(ctx, m(1), 0, nil))
	must(s.CreateMessage(ctx, m(2), 0, nil))
	ids, err := s.PendingIDs(ctx, "app", "dev-1", 10)
	if err != nil || !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("first read: %v %v", ids, err)
	}
	// Behind the store's back: a read from the database would miss it.
	must(s.db.Delete(queueKey("app", "dev-1", 1), pebble.Sync))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 2}) {
		t.Fatalf("second read %v, want [1 2] from memory", ids)
	}
	// The store's own writes are applied to the cached ids: 1 is still
	// there, so none of these is read from the database.
	must(s.CreateMessage(ctx, m(3), 0, nil))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("after a send %v, want [1 2 3] from memory", ids)
	}
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: m(4)}, {Message: m(5)}}, nil, nil)
	must(err)
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("after a batch send %v, want [1 2 3 4 5] from memory", ids)
	}
	deliver := func(m *store.Message) error { m.State = store.StateDelivered; return nil }
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 2, Fn: deliver}, {AppKey: "app", ID: 4, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 3, 5}) {
		t.Fatalf("after two PUBACKs %v, want [1 3 5] from memory", ids)
	}
	_, err = s.UpdateMessage(ctx, "app", 3, deliver)
	must(err)
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{1, 5}) {
		t.Fatalf("after an update %v, want [1 5] from memory", ids)
	}
	// A failed or unnamed change drops them: the next read is from the
	// database.
	s.pending.drop("app", "dev-1")
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); !slices.Equal(ids, []int64{5}) {
		t.Fatalf("after drop %v, want [5] read again", ids)
	}
}

// TestPendingIDsReadAhead checks that a read of the queue caches more
// than it was asked for, so that PUBACKs taking messages off the head of
// a long queue leave enough for the next calls, and that a head run short
// is read again.
func TestPendingIDsReadAhead(t *testing.T) {
	s, must := openTestApp(t, "dev-1")
	ctx := context.Background()
	var batch []store.BatchMessage
	for id := int64(1); id <= 10; id++ {
		batch = append(batch, store.BatchMessage{Message: store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60, ExpireTime: 1 << 40, State: store.StatePending}})
	}
	_, err := s.CreateMessages(ctx, "app", batch, nil, nil)
	must(err)
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 3); !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("first read %v", ids)
	}
	deliver := func(m *store.Message) error { m.State = store.StateDelivered; return nil }
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 1, Fn: deliver}, {AppKey: "app", ID: 2, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	// Behind the store's back: only a read from the database sees it.
	must(s.db.Delete(queueKey("app", "dev-1", 5), pebble.Sync))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 3); !slices.Equal(ids, []int64{3, 4, 5}) {
		t.Fatalf("after two PUBACKs %v, want [3 4 5] from memory (read ahead)", ids)
	}
	// 6 were read; after two more PUBACKs the two left cached are too
	// few.
	errs, err = s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 3, Fn: deliver}, {AppKey: "app", ID: 4, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 3); !slices.Equal(ids, []int64{6, 7, 8}) {
		t.Fatalf("with 2 of 3 cached %v, want [6 7 8] read again", ids)
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
	c.put("app", "dev", 3, []int64{3}, nil) // a write lands while the read is under way
	c.storeIDs("app", "dev", gen, []int64{1, 2}, 10)
	if ids, ok, _ := c.cachedIDs("app", "dev", 10); ok {
		t.Fatalf("a read that raced a write was cached: %v", ids)
	}
	_, _, gen = c.cachedIDs("app", "dev", 10)
	c.storeIDs("app", "dev", gen, []int64{1, 2, 3}, 10)
	if ids, ok, _ := c.cachedIDs("app", "dev", 10); !ok || !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("a read with no write meanwhile: %v %v", ids, ok)
	}
	// A read that saw a write whose put comes after it: put applies it
	// once.
	c.put("app", "dev", 3, []int64{3}, nil)
	c.put("app", "dev", 2, nil, []int64{1})
	c.put("app", "dev", 2, nil, []int64{1})
	if ids, ok, _ := c.cachedIDs("app", "dev", 10); !ok || !slices.Equal(ids, []int64{2, 3}) {
		t.Fatalf("writes applied twice: %v %v", ids, ok)
	}
	c.drop("app", "dev")
	if _, ok, _ := c.cachedIDs("app", "dev", 10); ok {
		t.Fatal("ids cached after drop")
	}
}

// TestCacheLookupDoesNotAllocate: a device's cached state is found
// without joining its app key and name into a new string (a real app key
// and name are longer than the 32 bytes Go joins on the stack).
func TestCacheLookupDoesNotAllocate(t *testing.T) {
	var c deviceCache
	app, name := "app-0123456789abcdef0123456789", "device-0123456789"
	c.put(app, name, store.Device{Name: name})
	if n := testing.AllocsPerRun(100, func() { c.get(app, name) }); n != 0 {
		t.Fatalf("cache lookup: %v allocations", n)
	}
}
