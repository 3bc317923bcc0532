package pebble

import (
	"slices"
	"sync"
	"sync/atomic"
)

// pendingCache holds each device's pending-queue count and, for the
// devices whose queue was read, the queue's first msgids. Every write
// that changes a queue changes its count too, under the device's stripe,
// and then calls put with the msgids it added to and removed from the
// queue (or drop when it failed, or changed the queue in a way it does
// not name), and put applies them to the cached ids: so PendingIDs
// answers from memory until the cached head of the queue runs short.
// Profiles of fan-out showed the queue scans at a quarter of the
// server's CPU, nearly all of it stepping over the tombstones that
// delivered messages leave in the device's key range until compaction;
// when the cache was dropped at every change, every PUBACK freeing a slot
// of a backlogged device's window still cost a scan (17% of fan-out's
// CPU).
//
// Between a write's commit and its put the ids can be stale by that one
// write. That is harmless to the dispatcher, the only reader: a writer
// announces its write (Notify, Wake, or the ack stage freeing a window
// slot) only after put, and that announcement reads again.
type pendingCache struct {
	counts countCache

	mu  sync.Mutex
	ids map[devKey]*queueIDs
	gen uint64 // last generation handed out

	// countGens changes, slot by slot, with every put and drop, under
	// the device's stripe: a count read without the stripe still holds
	// under it when its device's slot is what it was before the read
	// (countGen).
	countGens [countGenSlots]atomic.Uint64
}

// countGenSlots is how many slots countGens has: devices share a slot
// at random, and a shared slot only makes a read count be read again.
const countGenSlots = 1 << 14

// countGen returns the generation of the device's count: a count read
// after it was taken is still the device's count while it is the same.
func (c *pendingCache) countGen(app, name string) uint64 {
	return c.countGens[countGenSlot(app, name)].Load()
}

func countGenSlot(app, name string) uint32 {
	return fnvString(fnvString(fnvString(fnvOffset, "c"), app), name) % countGenSlots
}

// queueIDs is a device's cached queue: its first msgids in order, all of
// them when complete. gen changes with every change of the queue, so a
// read that raced a write does not store what it read; the write itself
// brings a known entry up to date.
type queueIDs struct {
	gen      uint64
	ids      []int64
	known    bool
	complete bool
}

// readAhead is how many times the asked limit a read of the queue
// fetches for the cache: the PUBACKs that take messages off the queue's
// head then leave enough ids cached for the next reads.
const readAhead = 2

func (c *pendingCache) get(app, name string) (int64, bool) { return c.counts.get(app, name) }

// learn records the device's count as counted from its queue (see
// pendingCount), under the device's stripe: no write changed the queue,
// so neither the generation nor the cached ids change.
func (c *pendingCache) learn(app, name string, n int64) { c.counts.put(app, name, n) }

// put records that a write left the device's queue with n messages,
// having added the msgids added and removed those removed.
func (c *pendingCache) put(app, name string, n int64, added, removed []int64) {
	c.putAll([]queuePut{{app: app, name: name, n: n, added: added, removed: removed}})
}

// queuePut is one device's put of putAll.
type queuePut struct {
	app, name      string
	n              int64
	added, removed []int64
}

// putAll is put for each of ps, each lock taken once: a batch send put
// its devices' queues three locks each (about 0.8 us a message in
// fan-out).
func (c *pendingCache) putAll(ps []queuePut) {
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		c.countGens[countGenSlot(p.app, p.name)].Add(1)
	}
	c.counts.mu.Lock()
	for _, p := range ps {
		c.counts.putLocked(p.app, p.name, p.n)
	}
	c.counts.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		return
	}
	for _, p := range ps {
		if e := c.ids[cacheKey(p.app, p.name)]; e != nil {
			c.gen++
			e.gen = c.gen
			if e.known {
				c.applyLocked(e, p.added, p.removed)
			}
		}
	}
}

// applyLocked applies a put's added and removed msgids to a known entry,
// under c.mu.
func (c *pendingCache) applyLocked(e *queueIDs, added, removed []int64) {
	// Both are idempotent: a read that raced this write may have stored
	// the queue with the write already in it.
	for _, id := range removed {
		if i, found := slices.BinarySearch(e.ids, id); found {
			e.ids = slices.Delete(e.ids, i, i+1)
		}
	}
	for _, id := range added {
		i, found := slices.BinarySearch(e.ids, id)
		if found || (!e.complete && i == len(e.ids)) {
			continue // beyond the cached head: not part of it
		}
		e.ids = slices.Insert(e.ids, i, id)
	}
	if len(e.ids) == 0 && !e.complete {
		*e = queueIDs{gen: c.gen} // the head ran out: read again
	}
}

// drop forgets the device's count and ids.
func (c *pendingCache) drop(app, name string) { c.dropAll(app, []string{name}) }

// dropAll is drop for many devices of one app, each cache locked once:
// a broadcast step's offline devices, whose counts the cache would only
// hold for nothing (putting 100 a step was a quarter of the step's
// serial write).
func (c *pendingCache) dropAll(app string, names []string) {
	if len(names) == 0 {
		return
	}
	for _, name := range names {
		c.countGens[countGenSlot(app, name)].Add(1)
	}
	c.counts.dropAll(app, names)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		if e := c.ids[cacheKey(app, name)]; e != nil {
			c.gen++
			*e = queueIDs{gen: c.gen}
		}
	}
}

// cachedIDs returns the first limit ids of the device's queue if they
// are known; otherwise the generation to pass to storeIDs with what a
// read finds.
func (c *pendingCache) cachedIDs(app, name string, limit int) ([]int64, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey(app, name)
	e := c.ids[k]
	if e == nil {
		if c.ids == nil {
			c.ids = map[devKey]*queueIDs{}
		}
		if len(c.ids) >= maxCached {
			for victim := range c.ids { // map order is random enough for eviction
				delete(c.ids, victim)
				break
			}
		}
		c.gen++
		e = &queueIDs{gen: c.gen}
		c.ids[k] = e
	}
	if e.known && (e.complete || limit <= len(e.ids)) {
		return slices.Clone(e.ids[:min(limit, len(e.ids))]), true, 0
	}
	return nil, false, e.gen
}

// storeIDs caches ids, read with limit, unless the queue changed since
// cachedIDs handed out gen. An empty queue is not kept: every device
// that connects has its queue read, and most idle devices' queues are
// empty, so keeping those would cost each connected device an entry
// (memory that grows with the connected devices) for reads that come
// once per connection.
func (c *pendingCache) storeIDs(app, name string, gen uint64, ids []int64, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey(app, name)
	e := c.ids[k]
	if e == nil || e.gen != gen {
		return
	}
	if len(ids) == 0 {
		delete(c.ids, k)
		return
	}
	e.ids, e.known, e.complete = slices.Clone(ids), true, len(ids) < limit
}
