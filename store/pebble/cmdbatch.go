package pebble

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

var _ store.CommandBatcher = (*Store)(nil)

// cmdChange is one command an UpdateCommands call writes.
type cmdChange struct {
	c    store.Command
	was  cmdIndexed
	size int // encoded
	// next is c as the update being applied leaves it, kept here rather
	// than in a variable of applyUpdates, which would be allocated for
	// every update.
	next store.Command
}

// UpdateCommands applies the updates under the stripes of their devices,
// all held across one commit (synced unless every change is lazy), with
// the job executions the commands stand for, as UpdateCommand writes
// them; see store.CommandBatcher. The delivery of commands records
// their sent and delivered states this way, many at a time, as the ack
// stage records messages' deliveries.
func (s *Store) UpdateCommands(ctx context.Context, updates []store.CommandUpdate, visible func()) ([]store.Command, []error, error) {
	if visible == nil {
		visible = func() {}
	}
	done := sync.OnceFunc(visible) // called before the fsync, or by the defer
	defer done()
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.exit()
	errs := make([]error, len(updates))
	devs := s.updateDevices(updates, errs)
	stripes := make([]int, 0, len(updates))
	for i, u := range updates {
		if errs[i] == nil {
			stripes = append(stripes, deviceStripe(u.AppKey, devs[i]))
		}
	}
	// Released before the fsync, and by the defer on an early return.
	unlock := sync.OnceFunc(s.lockStripes(stripes))
	defer unlock()
	out, order, evs, lazy := s.applyUpdates(updates, devs, errs)
	if len(order) == 0 {
		return out, errs, nil
	}
	exs, err := s.prepareChangeExecs(order)
	if err != nil {
		return nil, nil, fmt.Errorf("update commands: %w", err)
	}
	defer func() {
		for _, ex := range exs {
			ex.release()
		}
	}()
	fill := func(b *pebble.Batch) error {
		for _, ch := range order {
			if err := s.fillCommandChange(b, ch); err != nil {
				return err
			}
		}
		for _, ex := range exs {
			if err := ex.put(b); err != nil {
				return err
			}
		}
		return nil
	}
	var w *applied
	if lazy {
		err = s.writeLazy(fill)
	} else {
		w, err = s.applyEvents(func(b *pebble.Batch) ([]store.Event, error) { return evs, fill(b) })
	}
	for _, ch := range order {
		s.noteDue(ch.c, ch.was)
	}
	forget := func(err error) ([]store.Command, []error, error) {
		for _, ch := range order {
			s.openCmds.drop(ch.c.AppKey, ch.c.DeviceName)
			s.cmds.forget(ch.c.ID)
		}
		for _, ex := range exs {
			ex.forget()
		}
		return nil, nil, fmt.Errorf("update commands: %w", err)
	}
	if err != nil {
		return forget(err)
	}
	for _, ex := range exs {
		ex.apply()
	}
	for _, ch := range order {
		if ch.was.open && !ch.c.Open() {
			s.openCountAdd(ch.c.AppKey, ch.c.DeviceName, -1)
		}
		s.cmds.put(ch.c, ch.size)
	}
	if w != nil {
		// As in createCommands: the writers waiting for these stripes
		// need not wait for this write's fsync.
		unlock()
		done()
		if err := w.durable(); err != nil {
			return forget(err)
		}
	}
	return out, errs, nil
}

// updateDevices returns the device of each update's command, from the
// command cache or a read; an update whose command cannot be read gets
// its error in errs.
func (s *Store) updateDevices(updates []store.CommandUpdate, errs []error) []string {
	devs := make([]string, len(updates))
	for i, u := range updates {
		dev, ok := s.cmds.device(u.ID)
		if !ok {
			c, err := s.getCommand(u.AppKey, u.ID)
			if err != nil {
				errs[i] = err
				continue
			}
			dev = c.DeviceName
		}
		devs[i] = dev
	}
	return devs
}

// applyUpdates reads each update's command, under its device's stripe,
// and applies the update to it (or to its result of an earlier update of
// the same command); it returns the commands as updated, the changes to
// write in order, their events, and whether every change is lazy. An
// update that fails gets its error in errs.
func (s *Store) applyUpdates(updates []store.CommandUpdate, devs []string, errs []error) (out []store.Command, order []*cmdChange, evs []store.Event, lazy bool) {
	out = make([]store.Command, len(updates))
	changed := map[int64]*cmdChange{}
	// One allocation for every change: cap is never passed, so the
	// pointers into it stay valid.
	changes := make([]cmdChange, 0, len(updates))
	lazy = true
	for i, u := range updates {
		if errs[i] != nil {
			continue
		}
		ch := changed[u.ID]
		if ch == nil {
			c, err := s.getCommand(u.AppKey, u.ID)
			if err == nil && c.DeviceName != devs[i] {
				err = fmt.Errorf("command %d: device %q, cached as %q", u.ID, c.DeviceName, devs[i])
			}
			if err != nil {
				errs[i] = err
				continue
			}
			changes = append(changes, cmdChange{c: c, was: indexed(c)})
			ch = &changes[len(changes)-1]
		}
		ch.next = ch.c
		if _, err := store.ApplyCommandUpdate(&ch.next, u.ID, u.AppKey, u.Fn); err != nil {
			errs[i] = err
			continue
		}
		c := &ch.next
		lazy = lazy && c.Lazy && len(c.Emit) == 0 && c.Open()
		evs = append(evs, c.Emit...)
		c.Emit, c.Lazy = nil, false
		ch.c, out[i] = *c, *c
		if changed[u.ID] == nil {
			changed[u.ID] = ch
			order = append(order, ch)
		}
	}
	return out, order, evs, lazy
}

// prepareChangeExecs is prepareExecs for the changed commands, app by
// app in app order, so that every caller takes the jobs' execs locks in
// one order; the caller releases each.
func (s *Store) prepareChangeExecs(order []*cmdChange) ([]*execWrites, error) {
	byApp := map[string][]store.Command{}
	for _, ch := range order {
		byApp[ch.c.AppKey] = append(byApp[ch.c.AppKey], ch.c)
	}
	var exs []*execWrites
	for _, app := range slices.Sorted(maps.Keys(byApp)) {
		ex, err := s.prepareExecs(app, byApp[app], nil)
		if err != nil {
			for _, ex := range exs {
				ex.release()
			}
			return nil, err
		}
		exs = append(exs, ex)
	}
	return exs, nil
}

// fillCommandChange adds ch to b as UpdateCommand's write does: the
// command, and its index entries moved or removed.
func (s *Store) fillCommandChange(b *pebble.Batch, ch *cmdChange) error {
	if err := dropIndex(b, ch.c, ch.was); err != nil {
		return err
	}
	size, err := s.putCommand(b, ch.c, ch.was)
	ch.size = size
	return err
}
