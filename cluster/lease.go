package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// lease runs work while this process holds a key.
type lease struct {
	n           *Node
	key         string
	start       func() error
	stop        func()
	held        atomic.Bool
	lastRenewed time.Time

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Lead runs start while this node holds the lease called name, and stop
// when it loses it or closes. At most one node holds a lease: it is taken
// when free, renewed every LeaseEvery and lapses LeaseTTL after the last
// renewal, so work whose node died moves to another within about
// LeaseTTL + LeaseEvery. A holder that cannot renew in time stops first.
// Overlap is still possible around a long pause (a holder frozen past its
// TTL runs on until its next renewal fails), so the work must tolerate
// running twice for a moment.
func (n *Node) Lead(name string, start func() error, stop func()) {
	ctx, cancel := context.WithCancel(n.ctx)
	l := &lease{n: n, key: n.key("lease", name), start: start, stop: stop, cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	n.leases[name] = l
	n.mu.Unlock()
	go l.run(ctx)
}

// Leading reports whether this node holds the lease called name.
func (n *Node) Leading(name string) bool {
	n.mu.Lock()
	l := n.leases[name]
	n.mu.Unlock()
	return l != nil && l.held.Load()
}

// renewScript extends a lease this process holds: 1, or 0 when it does
// not hold it.
var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

func (l *lease) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.n.cfg.LeaseEvery)
	defer t.Stop()
	for {
		l.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *lease) step(ctx context.Context) {
	n := l.n
	ttl := n.cfg.LeaseTTL
	if !n.Valid() {
		// This node may have lost its node_id: it runs no work.
		if l.held.Load() {
			n.log.Warn("cluster: this node's claim on its node_id is not known to hold; stopping the work of a lease", "lease", l.key)
			l.held.Store(false)
			l.stop()
		}
		return
	}
	if !l.held.Load() {
		ok, err := n.rdb.SetNX(ctx, l.key, n.token, ttl).Result()
		if err != nil || !ok {
			return
		}
		l.lastRenewed = n.now()
		if err := l.start(); err != nil {
			n.log.Error("cluster: start the work of a lease", "lease", l.key, "err", err)
			releaseScript.Run(ctx, n.rdb, []string{l.key}, n.token)
			return
		}
		l.held.Store(true)
		n.log.Info("cluster: took a lease", "lease", l.key)
		// Starting may have taken a while: renew now, which stops the
		// work at once if the lease lapsed meanwhile.
	}
	res, err := renewScript.Run(ctx, n.rdb, []string{l.key}, n.token, ttl.Milliseconds()).Int()
	switch {
	case err == nil && res == 1:
		l.lastRenewed = n.now()
	case err == nil:
		n.log.Warn("cluster: lost a lease; stopping its work", "lease", l.key)
		l.held.Store(false)
		l.stop()
	case n.now().Sub(l.lastRenewed) > ttl-n.cfg.LeaseEvery:
		// Another renewal might come too late: stop before the lease can
		// lapse under running work.
		n.log.Warn("cluster: cannot renew a lease; stopping its work", "lease", l.key, "err", err)
		l.held.Store(false)
		l.stop()
	}
}

// close stops the lease's loop and, if held, its work, and frees the key.
func (l *lease) close() {
	l.once.Do(func() {
		l.cancel()
		<-l.done
		if l.held.Load() {
			l.held.Store(false)
			l.stop()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			releaseScript.Run(ctx, l.n.rdb, []string{l.key}, l.n.token)
		}
	})
}
