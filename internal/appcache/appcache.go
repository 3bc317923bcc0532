package appcache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TTL bounds how long a changed app (a rotated secret, a new
// property model) can go unseen by a node that did not make the change.
const TTL = time.Second

// Store is what the cache needs of the store.
type Store interface {
	GetApp(ctx context.Context, key string) (store.App, error)
	UpdateApp(ctx context.Context, key string, fn func(*store.App) error) (store.App, error)
}

var _ Store = store.Store(nil)

// Cache keeps recently used apps so authenticating a request or routing
// a callback does not read and decode the app from the store every time.
type Cache struct {
	store Store
	now   func() time.Time
	mu    sync.RWMutex
	apps  map[string]cachedApp
	// gen counts Updates and Forgets (under mu): a Get whose store read
	// overlapped one does not cache what it read, which may be the app
	// from before the change and would hide it for TTL.
	gen uint64
}

type cachedApp struct {
	app     store.App
	fetched time.Time
	missing bool // no such app: a stream of bad keys costs no store reads
}

// New returns an empty cache over st; now is the clock (time.Now).
func New(st Store, now func() time.Time) *Cache {
	return &Cache{store: st, now: now, apps: map[string]cachedApp{}}
}

// Get returns the app from the cache or the store, store.ErrNotFound if
// there is none. Misses are cached too; an app created on another node is
// seen within TTL.
func (c *Cache) Get(ctx context.Context, key string) (store.App, error) {
	now := c.now()
	c.mu.RLock()
	e, ok := c.apps[key]
	gen := c.gen
	c.mu.RUnlock()
	if ok && now.Sub(e.fetched) < TTL {
		if e.missing {
			return store.App{}, store.ErrNotFound
		}
		return e.app, nil
	}
	app, err := c.store.GetApp(ctx, key)
	missing := errors.Is(err, store.ErrNotFound)
	if err != nil && !missing {
		return app, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if len(c.apps) > 100000 {
			c.apps = map[string]cachedApp{} // bounded: start over rather than grow without limit
		}
		c.apps[key] = cachedApp{app: app, fetched: now, missing: missing}
	}
	c.mu.Unlock()
	return app, err
}

// Forget drops a key, so an app created on this node is seen at once.
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	c.gen++
	delete(c.apps, key)
	c.mu.Unlock()
}

// Update applies fn to the stored app atomically; the next Get reads it
// from the store.
func (c *Cache) Update(ctx context.Context, key string, fn func(*store.App) error) (store.App, error) {
	app, err := c.store.UpdateApp(ctx, key, fn)
	if err != nil {
		return app, err
	}
	// Forgotten rather than stored: two Updates at once may get here in
	// either order, and the one of the older write would stay for TTL.
	c.Forget(key)
	return app, nil
}
