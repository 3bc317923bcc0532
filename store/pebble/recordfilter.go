package pebble

import (
	"sync"

	"github.com/devmsg/devmsg/store"
)

// Records an app's callback settings drop.
//
// The callback router drops an outbox entry whose app has its switch off,
// no URL, or does not send the record's type (callback/routing.go), and
// CallbackSettings says records made while the switch is off are
// dropped. Writing such entries only to delete them costs a fan-out to
// apps without callbacks (most) half its bytes, and their compactions:
// the store leaves them out when the record is made. Apps change only
// through this store (the Pebble store is one process), so what it knows
// of them is exact.

// recordFilter says which record types the outbox keeps for one app.
type recordFilter struct {
	known bool // false: no settings were read; keep everything
	cb    store.CallbackSettings
}

// keeps reports whether a record of type typ goes to the outbox.
func (f recordFilter) keeps(typ int) bool {
	if !f.known {
		return true
	}
	return f.cb.Enabled && len(f.cb.URLs) > 0 && f.cb.Sends(typ)
}

// kept counts the records of rs that go to the outbox.
func (f recordFilter) kept(rs []store.Record) int {
	n := 0
	for _, r := range rs {
		if f.keeps(r.Type) {
			n++
		}
	}
	return n
}

// appSettings caches each app's callback settings for recordFilter.
// CreateApp and UpdateApp call changed before and after their write; a
// read that overlapped either does not enter the cache, so once an update
// has returned every record is filtered by its settings.
type appSettings struct {
	mu   sync.Mutex
	gen  uint64
	apps map[string]store.CallbackSettings
}

// changed forgets appKey's settings.
func (c *appSettings) changed(appKey string) {
	c.mu.Lock()
	c.gen++
	delete(c.apps, appKey)
	c.mu.Unlock()
}

// recordFilter returns the filter of appKey's records.
func (s *Store) recordFilter(appKey string) recordFilter {
	c := &s.appSettings
	c.mu.Lock()
	cb, ok := c.apps[appKey]
	gen := c.gen
	c.mu.Unlock()
	if ok {
		return recordFilter{known: true, cb: cb}
	}
	var app store.App
	if err := s.getJSON(key(pApp, appKey), &app); err != nil {
		// No app (the router would drop the entries, but not this
		// store's callers that keep apps elsewhere), or no answer.
		return recordFilter{}
	}
	c.mu.Lock()
	if c.gen == gen {
		if c.apps == nil {
			c.apps = map[string]store.CallbackSettings{}
		}
		c.apps[appKey] = app.Callback
	}
	c.mu.Unlock()
	return recordFilter{known: true, cb: app.Callback}
}
