package delivery

import "sync"

// deviceLocks is a lock per device, held while its entry is in use:
// what holds one may block on the device's socket (a write waits up to
// the broker's write timeout for a device that stopped reading), and
// that must not hold up any other device, as a lock shared by several
// devices would.
type deviceLocks struct {
	mu sync.Mutex
	m  map[cmdDevice]*deviceLock
}

type cmdDevice struct{ app, dev string }

type deviceLock struct {
	sync.Mutex
	users int // holders and waiters, under deviceLocks.mu
}

// lock locks the app's device and returns its unlock.
func (l *deviceLocks) lock(app, dev string) func() {
	k := cmdDevice{app, dev}
	l.mu.Lock()
	e := l.m[k]
	if e == nil {
		if l.m == nil {
			l.m = map[cmdDevice]*deviceLock{}
		}
		e = new(deviceLock)
		l.m[k] = e
	}
	e.users++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, k)
		}
		l.mu.Unlock()
	}
}
