package pebble

import (
	"slices"
	"sync"
)

// pendingCache holds each device's pending-queue count and, for the
// devices whose queue was read since it last changed, the queue's
// msgids. Every write that changes a queue changes its count too, under
// the device's stripe, and then calls put (or drop when it failed), which
// forgets the ids: so PendingIDs answers from memory until the queue
// changes. Profiles of fan-out showed the queue scans at a quarter of the
// server's CPU, nearly all of it stepping over the tombstones that
// delivered messages leave in the device's key range until compaction.
//
// Between a write's commit and its put the ids can be stale by that one
// write. That is harmless to the dispatcher, the only reader: a writer
// announces its write (Notify, Wake, or the ack stage freeing a window
// slot) only after put, and that announcement reads again.
type pendingCache struct {
	counts countCache

	mu  sync.Mutex
	ids map[string]*queueIDs
	gen uint64 // last generation handed out
}

// queueIDs is a device's cached queue: its first msgids, all of them when
// complete. gen changes with every change of the queue, so a read that
// raced a write does not store what it read.
type queueIDs struct {
	gen      uint64
	ids      []int64
	known    bool
	complete bool
}

func (c *pendingCache) get(app, name string) (int64, bool) { return c.counts.get(app, name) }

func (c *pendingCache) put(app, name string, n int64) {
	c.counts.put(app, name, n)
	c.changed(app, name)
}

func (c *pendingCache) drop(app, name string) {
	c.counts.drop(app, name)
	c.changed(app, name)
}

// changed forgets the device's cached ids.
func (c *pendingCache) changed(app, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.ids[cacheKey(app, name)]; e != nil {
		c.gen++
		*e = queueIDs{gen: c.gen}
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
			c.ids = map[string]*queueIDs{}
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
// (issue 16's memory budget) for reads that come once per connection.
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
