package appcache

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// pausedStore holds GetApp after its read until released: a reader
// descheduled between reading an app and caching it.
type pausedStore struct {
	store.Store
	read    chan struct{} // closed once GetApp has read
	release chan struct{}
}

func (p *pausedStore) GetApp(ctx context.Context, key string) (store.App, error) {
	app, err := p.Store.GetApp(ctx, key)
	if p.read != nil {
		close(p.read)
		p.read = nil
		<-p.release
	}
	return app, err
}

// openWithApp opens a Pebble store holding app "k".
func openWithApp(t *testing.T) store.Store {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateApp(context.Background(), store.App{Key: "k", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	return st
}

// A Get that read the app before an Update and caches it after must not
// hide the update: the switch-on of an app's callbacks, returned to the
// admin, would be unseen by the callback router for TTL, and its records
// dropped ("switch off").
func TestGetOverlappingUpdateDoesNotCacheOldApp(t *testing.T) {
	st := openWithApp(t)
	ctx := context.Background()
	ps := &pausedStore{Store: st, read: make(chan struct{}), release: make(chan struct{})}
	c := New(ps, time.Now)
	read := ps.read
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Get(ctx, "k")
	}()
	<-read
	if _, err := c.Update(ctx, "k", func(a *store.App) error { a.Callback.Enabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	close(ps.release)
	<-done
	app, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !app.Callback.Enabled {
		t.Fatal("Get after Update returned the app as it was before the update")
	}
}

// slowUpdate holds the first UpdateApp after its write until released.
type slowUpdate struct {
	store.Store
	held    atomic.Bool
	wrote   chan struct{}
	release chan struct{}
}

func (p *slowUpdate) UpdateApp(ctx context.Context, key string, fn func(*store.App) error) (store.App, error) {
	app, err := p.Store.UpdateApp(ctx, key, fn)
	if p.held.CompareAndSwap(false, true) {
		close(p.wrote)
		<-p.release
	}
	return app, err
}

// Two Updates at once: the cache must end with the later write, not with
// the one whose Update returned last.
func TestUpdatesOutOfOrderKeepTheLaterWrite(t *testing.T) {
	st := openWithApp(t)
	ctx := context.Background()
	ps := &slowUpdate{Store: st, wrote: make(chan struct{}), release: make(chan struct{})}
	c := New(ps, time.Now)
	wrote := ps.wrote
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Update(ctx, "k", func(a *store.App) error { a.Callback.Enabled = true; return nil })
	}()
	<-wrote
	if _, err := c.Update(ctx, "k", func(a *store.App) error { a.Callback.Enabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	close(ps.release)
	<-done
	app, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if app.Callback.Enabled {
		t.Fatal("the cache holds the earlier of two updates")
	}
}
