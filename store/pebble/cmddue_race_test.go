package pebble

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TestDueCommandsUnderWrites checks that every command due is found by
// DueCommands while writers create commands, deliver them, report
// progress and answer them, and sweepers end what is due, all at once.
// The run is far shorter than the full-scan period, so the scans from
// the floor alone must find every command due.
func TestDueCommandsUnderWrites(t *testing.T) {
	const devices, writers = 64, 8
	names := make([]string, devices)
	for i := range names {
		names[i] = "d" + strconv.Itoa(i)
	}
	s, _ := openTestApp(t, names...)
	ctx := context.Background()
	run := 2 * time.Second
	if testing.Short() {
		run = time.Second
	}
	d := &dueRace{s: s, stop: time.Now().Add(run), errs: make(chan error, writers+2)}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for n := 0; time.Now().Before(d.stop); n++ {
				if err := d.write(ctx, names[(w+n*writers)%devices], n, w%2 == 1); err != nil {
					d.errs <- err
					return
				}
				time.Sleep(time.Millisecond) // let the sweepers keep up
			}
		})
	}
	done := make(chan struct{})
	var sw sync.WaitGroup
	for range 2 {
		sw.Go(func() { d.sweep(ctx, done) })
	}
	wg.Wait()
	// Every command is due by 2 s (ttl 0 plus the grace) after the last
	// write; the sweepers have until 10 s, a third of the full-scan
	// period, to end them: a command the floor passed over stays open.
	var open []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if open = d.open(t, ctx); len(open) == 0 || time.Now().After(deadline) {
			break
		}
	}
	close(done)
	sw.Wait()
	close(d.errs)
	for err := range d.errs {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Fatalf("%d commands still open 10 s past the last write, e.g. %v", len(open), open[:min(len(open), 10)])
	}
}

// dueRace is the state of TestDueCommandsUnderWrites.
type dueRace struct {
	s    *Store
	stop time.Time
	errs chan error
	id   atomic.Int64
	ids  sync.Map // id → struct{}: the commands queued
}

var errDueUnchanged = errors.New("unchanged")

// update is UpdateCommand of the app's command id, nil when fn leaves it
// unchanged.
func (d *dueRace) update(ctx context.Context, id int64, fn func(c *store.Command) error) error {
	_, err := d.s.UpdateCommand(ctx, "app", id, fn)
	if errors.Is(err, errDueUnchanged) {
		return nil
	}
	return err
}

// write creates a command of dev with the shortest ttl and timeout, and
// by n leaves it to expire, delivers it and leaves it to time out,
// delivers it and reports progress, or answers it. A late write records
// a PUBACK of 1.5 s ago, as the writes of delivered states do when they
// fall behind: its deadline has passed, below the floor the scans left.
func (d *dueRace) write(ctx context.Context, dev string, n int, late bool) error {
	id := d.id.Add(1)
	c := store.Command{ID: id, DeviceName: dev, Name: "n", TTL: 0, Timeout: 1, State: store.CmdQueued, TimeCreate: time.Now().UnixMilli()}
	out, err := d.s.CreateCommands(ctx, "app", []store.Command{c}, 0, nil)
	if err != nil || out[0].State != store.CmdQueued { // queue full
		return err
	}
	d.ids.Store(id, struct{}{})
	delivered := func(c *store.Command) error {
		if !c.Undelivered() {
			return errDueUnchanged
		}
		at := time.Now().UnixMilli()
		if late {
			at -= 1500
		}
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, at, at+c.Timeout*1000
		return nil
	}
	switch n % 4 {
	case 1:
		return d.update(ctx, id, delivered)
	case 2:
		if err := d.update(ctx, id, delivered); err != nil {
			return err
		}
		return d.update(ctx, id, func(c *store.Command) error {
			if !c.Open() {
				return errDueUnchanged
			}
			c.State, c.Deadline = store.CmdInProgress, time.Now().UnixMilli()+c.Timeout*1000
			return nil
		})
	case 3:
		return d.update(ctx, id, func(c *store.Command) error {
			if !c.Open() {
				return errDueUnchanged
			}
			c.State, c.TimeDone = store.CmdSucceeded, time.Now().UnixMilli()
			return nil
		})
	}
	return nil
}

// sweep ends, until done, the commands due as command.Sweep does, but
// every 5 ms and with a small limit, so that scans are cut short.
func (d *dueRace) sweep(ctx context.Context, done <-chan struct{}) {
	const limit = 16
	for {
		select {
		case <-done:
			return
		case <-time.After(5 * time.Millisecond):
		}
		for {
			now := time.Now().UnixMilli()
			due, err := d.s.DueCommands(ctx, now, limit)
			if err != nil {
				d.errs <- err
				return
			}
			for _, c := range due {
				if err := d.update(ctx, c.ID, func(c *store.Command) error {
					if !c.Open() || c.Due() > now {
						return errDueUnchanged
					}
					c.State, c.TimeDone = store.CmdExpired, now
					return nil
				}); err != nil {
					d.errs <- err
					return
				}
			}
			if len(due) < limit {
				break
			}
		}
	}
}

// open returns the commands queued that are still open.
func (d *dueRace) open(t *testing.T, ctx context.Context) []string {
	var open []string
	d.ids.Range(func(k, _ any) bool {
		c, err := d.s.GetCommand(ctx, "app", k.(int64))
		if err != nil {
			t.Fatal(err)
		}
		if c.Open() {
			open = append(open, fmt.Sprintf("%d (%s, due %d ms ago)", c.ID, c.State, time.Now().UnixMilli()-c.Due()))
		}
		return true
	})
	return open
}
