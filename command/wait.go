package command

import (
	"context"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// waiters holds, per command id, the channel closed when it ends. A
// waiting call costs a channel and a map entry; nothing polls.
type waiters struct {
	mu sync.Mutex
	m  map[int64]*waiter
}

type waiter struct {
	ch  chan struct{}
	app string // the command's app
	n   int    // calls watching
	// ended is the command as its end was stored, set before ch is
	// closed when the end was here (wakeEnded); nil when another node
	// ended it.
	ended *store.Command
}

// watch returns the waiter of command id of app, whose channel is closed
// when the command ends (its ended set first when the end was stored
// here), and the function that stops watching.
func (w *waiters) watch(app string, id int64) (*waiter, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[int64]*waiter{}
	}
	e := w.m[id]
	if e == nil {
		e = &waiter{ch: make(chan struct{}), app: app}
		w.m[id] = e
	}
	e.n++
	return e, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		e.n--
		if e.n == 0 && w.m[id] == e {
			delete(w.m, id)
		}
	}
}

// watched returns the commands calls watch: their ids and apps.
func (w *waiters) watched() map[int64]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[int64]string, len(w.m))
	for id, e := range w.m {
		m[id] = e.app
	}
	return m
}

// wake closes the channel of command id, if a call watches it.
func (w *waiters) wake(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[id]; e != nil {
		close(e.ch)
		delete(w.m, id)
	}
}

// wakeEnded is wake handing the watching calls c, the command as its
// end was durably stored, so that they need not read it again.
func (w *waiters) wakeEnded(c store.Command) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[c.ID]; e != nil {
		c.Emit = nil
		e.ended = &c
		close(e.ch)
		delete(w.m, c.ID)
	}
}

// Wait returns cmds, the app's commands as last read, once each has
// ended, d has passed or ctx is done, whichever comes first: the open
// ones are read again after they end. Refused results (ID 0) stay as
// they are. A command is woken only once its end is durable; one
// returned as read otherwise may show a lazy write (Sent) or
// an end still syncing, so Wait then calls Barrier before it returns.
// Commands returned as given (d is 0, or each had ended) are as durable
// as the caller's copy.
func (s *Service) Wait(ctx context.Context, appKey string, cmds []store.Command, d time.Duration) ([]store.Command, error) {
	if d <= 0 {
		return cmds, nil
	}
	type watched struct {
		i       int
		w       *waiter
		release func()
	}
	var open []watched
	defer func() {
		for _, w := range open {
			w.release()
		}
	}()
	for i, c := range cmds {
		if c.ID != 0 && c.Open() {
			e, release := s.waiters.watch(appKey, c.ID)
			open = append(open, watched{i, e, release})
		}
	}
	if len(open) == 0 {
		return cmds, nil
	}
	out := append([]store.Command(nil), cmds...)
	timer := time.NewTimer(d)
	defer timer.Stop()
	// Read once after watching: a command that ended between its last
	// read and the watch woke nobody.
	for _, w := range open {
		c, err := s.store.GetCommand(ctx, appKey, out[w.i].ID)
		if err != nil {
			return nil, commandErr(out[w.i].ID, err)
		}
		out[w.i] = c
	}
	// unwoken counts the commands of out last read before their wake.
	unwoken := len(open)
	for _, w := range open {
		if !out[w.i].Open() {
			continue
		}
		select {
		case <-w.w.ch:
		case <-timer.C:
			// Read as they are now, and possibly lazily written: made
			// durable before they are shown.
			now, err := s.reread(ctx, appKey, out)
			if err != nil {
				return nil, err
			}
			return now, s.store.Barrier(ctx)
		case <-ctx.Done():
			return out, nil
		}
		unwoken--
		if e := w.w.ended; e != nil {
			out[w.i] = *e // handed by its end: durable, as read after a wake
			continue
		}
		c, err := s.store.GetCommand(ctx, appKey, out[w.i].ID)
		if err != nil {
			return nil, commandErr(out[w.i].ID, err)
		}
		out[w.i] = c
	}
	return out, s.durable(ctx, unwoken)
}

// durable makes what Wait read durable before it is shown, unless every
// command was read after its wake.
func (s *Service) durable(ctx context.Context, unwoken int) error {
	if unwoken == 0 {
		return nil
	}
	return s.store.Barrier(ctx)
}

// reread reads again the commands of cmds still open when a wait ran
// out: the answer shows each as it is then (delivered, in progress), not
// as it was when the wait began.
func (s *Service) reread(ctx context.Context, appKey string, cmds []store.Command) ([]store.Command, error) {
	for i, c := range cmds {
		if c.ID == 0 || !c.Open() {
			continue
		}
		now, err := s.store.GetCommand(ctx, appKey, c.ID)
		if err != nil {
			return nil, commandErr(c.ID, err)
		}
		cmds[i] = now
	}
	return cmds, nil
}
