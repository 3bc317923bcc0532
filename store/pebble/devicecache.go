package pebble

import (
	"sync"

	"github.com/devmsg/devmsg/store"
)

// maxCached bounds each cache (a device entry is about 300 bytes).
const maxCached = 1 << 18

// cache is a bounded map from app and device name to V. The Store keeps
// two: decoded devices, because every REST call that names a device reads
// it and profiling showed that read (an LSM lookup and a JSON decode) at a
// tenth of the server's CPU under a send load; and pending-queue counts,
// saving a lookup per send. Every write of either goes through the Store
// and updates the cache under the device's lock, so a cache is never
// staler than the database.
type cache[V any] struct {
	mu sync.RWMutex
	m  map[devKey]V
}

// devKey is a cache's key: two strings, not one joined, which cost an
// allocation per lookup (2% of the server in fan-out).
type devKey struct{ app, name string }

func cacheKey(app, name string) devKey { return devKey{app, name} }

func (c *cache[V]) get(app, name string) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[cacheKey(app, name)]
	return v, ok
}

func (c *cache[V]) put(app, name string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(app, name, v)
}

// putLocked is put under c.mu.
func (c *cache[V]) putLocked(app, name string, v V) {
	if c.m == nil {
		c.m = make(map[devKey]V)
	}
	k := cacheKey(app, name)
	if _, ok := c.m[k]; !ok && len(c.m) >= maxCached {
		for victim := range c.m { // map order is random enough for eviction
			delete(c.m, victim)
			break
		}
	}
	c.m[k] = v
}

func (c *cache[V]) drop(app, name string) { c.dropAll(app, []string{name}) }

// dropAll is drop for several devices of one app, under one lock.
func (c *cache[V]) dropAll(app string, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		delete(c.m, cacheKey(app, name))
	}
}

// Compile-time shapes of the two caches the Store holds.
type (
	deviceCache = cache[store.Device]
	countCache  = cache[int64]
)
