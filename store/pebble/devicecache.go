package pebble

import (
	"sync"

	"github.com/devmsg/devmsg/store"
)

// maxCachedDevices bounds the device and count caches (about 300 bytes a
// device entry).
const maxCachedDevices = 1 << 18

// deviceCache keeps decoded devices: every REST call that names a device
// reads it, and profiling showed that read (an LSM lookup and a JSON
// decode) at a tenth of the server's CPU under a send load. Every write of
// a device goes through this Store and updates the cache under the
// device's lock, so the cache is never staler than the database.
type deviceCache struct {
	mu sync.RWMutex
	m  map[string]store.Device
}

func cacheKey(app, name string) string { return app + "\x00" + name }

func (c *deviceCache) get(app, name string) (store.Device, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.m[cacheKey(app, name)]
	return d, ok
}

func (c *deviceCache) put(d store.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]store.Device)
	}
	k := cacheKey(d.AppKey, d.Name)
	if _, ok := c.m[k]; !ok && len(c.m) >= maxCachedDevices {
		for victim := range c.m { // map order is random enough for eviction
			delete(c.m, victim)
			break
		}
	}
	c.m[k] = d
}

func (c *deviceCache) drop(app, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cacheKey(app, name))
}

// countCache keeps pending-queue counts, saving a lookup per send. Callers
// hold the device's lock around get, the write and put.
type countCache struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *countCache) get(app, name string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[cacheKey(app, name)]
	return n, ok
}

func (c *countCache) put(app, name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]int64)
	}
	k := cacheKey(app, name)
	if _, ok := c.m[k]; !ok && len(c.m) >= maxCachedDevices {
		for victim := range c.m {
			delete(c.m, victim)
			break
		}
	}
	c.m[k] = n
}

func (c *countCache) drop(app, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cacheKey(app, name))
}
