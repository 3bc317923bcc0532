package pebble

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// keepings returns n messages over every shard, each third not pending
// (kept by dropping it), and each fifth put twice.
func keepings(n int) []keeping {
	var es []keeping
	for i := range n {
		st := store.StatePending
		if i%3 == 2 {
			st = store.StateDelivered
		}
		k := keeping{id: int64(i), raw: []byte(fmt.Sprint(i)), m: store.Message{ID: int64(i), State: st}}
		es = append(es, k)
		if i%5 == 0 {
			k.m.Body = "again"
			es = append(es, k)
		}
	}
	return es
}

// TestMsgCacheKeepAllIsKeep checks that keepAll leaves the cache as
// keeping each message in turn does, full shards and msgCacheHold
// included, and reads the clock once.
func TestMsgCacheKeepAllIsKeep(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	clock := func() time.Time { reads++; return now }
	one, all := msgCache{now: clock}, msgCache{now: clock}
	// Fill one shard nearly full first, so the batch meets a full shard.
	for i := range msgCacheShardSize - 3 {
		id := int64(1_000_000+i) * msgCacheShards
		one.put(id, nil, store.Message{ID: id, State: store.StatePending})
		all.put(id, nil, store.Message{ID: id, State: store.StatePending})
	}
	for round := range 3 {
		es := keepings(500)
		for _, k := range es {
			one.keep(k.id, k.raw, k.m)
		}
		reads = 0
		all.keepAll(es)
		if reads != 1 {
			t.Errorf("round %d: keepAll read the clock %d times, want once", round, reads)
		}
		for i := range one.shards {
			a, b := &one.shards[i], &all.shards[i]
			if !reflect.DeepEqual(a.byID, b.byID) || !slices.Equal(a.order[a.head:], b.order[b.head:]) || a.seq != b.seq {
				t.Fatalf("round %d: shard %d after keepAll differs from keep", round, i)
			}
		}
		now = now.Add(msgCacheHold / 2)
	}
	if e := all.get(10); e == nil || e.m.Body != "again" {
		t.Fatalf("message put twice cached as %+v", e)
	}
	if all.get(2) != nil {
		t.Fatal("delivered message cached")
	}
}

// TestPendingCachePutAllIsPut checks that putAll leaves counts, ids and
// generations as the put before it (putOne) did device by device.
func TestPendingCachePutAllIsPut(t *testing.T) {
	var one, all pendingCache
	names := []string{"d0", "d1", "d2", "d3", "d4"}
	for _, c := range []*pendingCache{&one, &all} {
		for i, name := range names[:4] {
			_, _, gen := c.cachedIDs("app", name, 10)
			ids := []int64{int64(10 * i), int64(10*i + 2), int64(10*i + 4)}
			if i == 3 {
				ids = nil // an empty queue is not kept
			}
			c.storeIDs("app", name, gen, ids, 3+i%2) // d1 complete, d0 and d2 not
		}
	}
	ps := []queuePut{
		{app: "app", name: "d0", n: 4, added: []int64{1, 100}},
		{app: "app", name: "d1", n: 3, added: []int64{99}, removed: []int64{10}},
		{app: "app", name: "d2", n: 0, removed: []int64{20, 22, 24}},
		{app: "app", name: "d3", n: 1, added: []int64{31}},
		{app: "app", name: "d4", n: 2, added: []int64{41, 42}},
		{app: "other", name: "d0", n: 7},
	}
	for _, p := range ps {
		one.putOne(p.app, p.name, p.n, p.added, p.removed)
	}
	all.putAll(ps)
	if !reflect.DeepEqual(one.counts.m, all.counts.m) || one.gen != all.gen || one.countGens != all.countGens {
		t.Fatalf("putAll left counts %v gen %d, put %v gen %d", all.counts.m, all.gen, one.counts.m, one.gen)
	}
	if !reflect.DeepEqual(one.ids, all.ids) {
		t.Fatalf("putAll left ids %v, put %v", all.ids, one.ids)
	}
	if ids, ok, _ := all.cachedIDs("app", "d0", 3); !ok || !slices.Equal(ids, []int64{0, 1, 2}) {
		t.Fatalf("d0's head after putAll: %v %v", ids, ok)
	}
	if ids, ok, _ := all.cachedIDs("app", "d1", 10); !ok || !slices.Equal(ids, []int64{12, 14, 99}) {
		t.Fatalf("d1's queue after putAll: %v %v", ids, ok)
	}
	if n, ok := all.get("other", "d0"); !ok || n != 7 {
		t.Fatalf("other app's count %d %v", n, ok)
	}
}

// putOne is pendingCache.put as it was before putAll, device by device:
// the reference putAll must match.
func (c *pendingCache) putOne(app, name string, n int64, added, removed []int64) {
	c.countGens[countGenSlot(app, name)].Add(1)
	c.counts.put(app, name, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.ids[cacheKey(app, name)]
	if e == nil {
		return
	}
	c.gen++
	e.gen = c.gen
	if !e.known {
		return
	}
	for _, id := range removed {
		if i, found := slices.BinarySearch(e.ids, id); found {
			e.ids = slices.Delete(e.ids, i, i+1)
		}
	}
	for _, id := range added {
		i, found := slices.BinarySearch(e.ids, id)
		if found || (!e.complete && i == len(e.ids)) {
			continue
		}
		e.ids = slices.Insert(e.ids, i, id)
	}
	if len(e.ids) == 0 && !e.complete {
		*e = queueIDs{gen: c.gen}
	}
}

// BenchmarkCacheBatchPuts compares a 1000-message batch's cache puts one
// by one (as before) with keepAll and putAll; the messages kept are
// dropped again, as their PUBACKs' writes do.
func BenchmarkCacheBatchPuts(b *testing.B) {
	es := make([]keeping, 1000)
	ps := make([]queuePut, 1000)
	for i := range es {
		es[i] = keeping{id: int64(i), m: store.Message{ID: int64(i), State: store.StatePending}}
		ps[i] = queuePut{app: "app", name: fmt.Sprintf("dev-%04d", i), n: 1, added: []int64{int64(i)}}
	}
	b.Run("keep", func(b *testing.B) {
		var c msgCache
		for b.Loop() {
			for _, k := range es {
				c.keep(k.id, k.raw, k.m)
			}
			for _, k := range es { // the PUBACKs' writes
				c.drop(k.id)
			}
		}
	})
	b.Run("keepAll", func(b *testing.B) {
		var c msgCache
		for b.Loop() {
			c.keepAll(es)
			for _, k := range es {
				c.drop(k.id)
			}
		}
	})
	b.Run("put", func(b *testing.B) {
		var c pendingCache
		for b.Loop() {
			for _, p := range ps {
				c.put(p.app, p.name, p.n, p.added, p.removed)
			}
		}
	})
	b.Run("putAll", func(b *testing.B) {
		var c pendingCache
		for b.Loop() {
			c.putAll(ps)
		}
	})
}
