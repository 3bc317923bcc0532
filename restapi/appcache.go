package restapi

import (
	"context"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// appCacheTTL bounds how long a changed app (a rotated secret, a new
// property model) can go unseen by a node that did not make the change.
const appCacheTTL = time.Second

// appCache keeps recently used apps so authenticating a request does not
// read and decode the app from the store every time.
type appCache struct {
	store store.Store
	now   func() time.Time
	mu    sync.RWMutex
	apps  map[string]cachedApp
}

type cachedApp struct {
	app     store.App
	fetched time.Time
}

func newAppCache(st store.Store, now func() time.Time) *appCache {
	return &appCache{store: st, now: now, apps: map[string]cachedApp{}}
}

// get returns the app from the cache or the store (store.ErrNotFound if
// there is none; misses are not cached so a new app works at once).
func (c *appCache) get(ctx context.Context, key string) (store.App, error) {
	now := c.now()
	c.mu.RLock()
	e, ok := c.apps[key]
	c.mu.RUnlock()
	if ok && now.Sub(e.fetched) < appCacheTTL {
		return e.app, nil
	}
	app, err := c.store.GetApp(ctx, key)
	if err != nil {
		return app, err
	}
	c.mu.Lock()
	if len(c.apps) > 100000 {
		c.apps = map[string]cachedApp{} // bounded: start over rather than grow without limit
	}
	c.apps[key] = cachedApp{app, now}
	c.mu.Unlock()
	return app, nil
}

// update applies fn to the stored app atomically and refreshes the cache.
func (c *appCache) update(ctx context.Context, key string, fn func(*store.App) error) (store.App, error) {
	app, err := c.store.UpdateApp(ctx, key, fn)
	if err != nil {
		return app, err
	}
	c.mu.Lock()
	c.apps[app.Key] = cachedApp{app, c.now()}
	c.mu.Unlock()
	return app, nil
}
