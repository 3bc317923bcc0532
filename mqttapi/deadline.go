package mqttapi

import (
	"context"
	"sync/atomic"
	"time"
)

// storeTimeout bounds the wait for a device's publish to be stored; the
// publish is refused after it.
const storeTimeout = 10 * time.Second

// storeDeadlineStep is how long one context of storeDeadlines is handed
// out: a publish waits at least storeTimeout and less than
// storeTimeout+storeDeadlineStep.
const storeDeadlineStep = time.Second

// storeDeadlines hands the publishes that wait for the store their
// context: one per storeDeadlineStep, shared, rather than a context and
// a timer made and stopped for each publish, which was about 1% of the
// server's CPU at 20,000 command answers a second. The contexts are
// never cancelled early; each ends at its deadline.
type storeDeadlines struct {
	cur atomic.Pointer[storeDeadline]
}

type storeDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // run by the context's own timer at its deadline
	until  time.Time          // handed out before then
}

// get returns a context that ends storeTimeout or a little more from now.
func (d *storeDeadlines) get() context.Context {
	now := time.Now()
	if c := d.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(storeTimeout+storeDeadlineStep))
	c := &storeDeadline{ctx: ctx, cancel: cancel, until: now.Add(storeDeadlineStep)}
	d.cur.Store(c)
	return c.ctx
}
