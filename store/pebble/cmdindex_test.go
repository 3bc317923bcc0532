package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestCommandIndexAfterReopen makes random writes of commands (lazy and
// synced, one by one and in batches, ended and moved on, with flushes
// between them and a full compaction after), then checks
// that every read agrees with the store as reopened: each command as
// read before the close, and the open (O/) and due (D/) entries, which
// must be exactly those of the open commands.
func TestCommandIndexAfterReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	devs := []store.Device{{Name: "d1", Secret: "s"}, {Name: "d2", Secret: "s"}, {Name: "d3", Secret: "s"}}
	_, err = s.CreateDevices(ctx, "app", devs)
	must(err)
	rng := rand.New(rand.NewPCG(1, 2))
	var ids []int64
	next := int64(100)
	results := []json.RawMessage{json.RawMessage(`{"a" : 1}`), json.RawMessage(`"<é>"`), json.RawMessage(`"` + strings.Repeat("x", 3000) + `"`), nil}
	fns := []func(*store.Command) error{
		func(c *store.Command) error { // sent
			if c.State != store.CmdQueued {
				return errUnchangedTest
			}
			c.State, c.TimeSent, c.Lazy = store.CmdSent, 2000, true
			return nil
		},
		func(c *store.Command) error { // delivered
			if !c.Undelivered() {
				return errUnchangedTest
			}
			c.State, c.TimeDelivered, c.Deadline, c.Lazy = store.CmdDelivered, 3000, 3000+rng.Int64N(5)*1000, true
			return nil
		},
		func(c *store.Command) error { // progress, the deadline moved or not
			if !c.Open() {
				return errUnchangedTest
			}
			c.State, c.Progress = store.CmdInProgress, rng.IntN(100)
			if rng.IntN(2) == 0 {
				c.Deadline += 1000
			}
			return nil
		},
		func(c *store.Command) error { // answered
			if !c.Open() {
				return errUnchangedTest
			}
			c.State, c.TimeDone, c.Answered, c.Result, c.Message = store.CmdSucceeded, 9000, true, results[rng.IntN(len(results))], "ok\u2028"
			c.Emit = []store.Event{{Type: "command.done", Time: 9000, Data: []byte(`{}`)}}
			return nil
		},
	}
	// Readers without the stripes run alongside the writes (for -race).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := int64(0); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = s.GetCommand(ctx, "app", 101+n%200)
		}
	}()
	for round := 0; round < 300; round++ {
		switch rng.IntN(3) {
		case 0:
			var cs []store.Command
			for range 1 + rng.IntN(4) {
				next++
				cs = append(cs, store.Command{ID: next, DeviceName: devs[rng.IntN(len(devs))].Name, Name: "x", TTL: 60, Timeout: 30,
					State: store.CmdQueued, TimeCreate: 1000 + rng.Int64N(3)*1000})
			}
			out, err := s.CreateCommands(ctx, "app", cs, 0, nil)
			must(err)
			for _, c := range out {
				ids = append(ids, c.ID)
			}
		case 1:
			if len(ids) == 0 {
				continue
			}
			_, _ = s.UpdateCommand(ctx, "app", ids[rng.IntN(len(ids))], fns[rng.IntN(len(fns))])
		case 2:
			var us []store.CommandUpdate
			for range 1 + rng.IntN(6) {
				if len(ids) == 0 {
					break
				}
				us = append(us, store.CommandUpdate{AppKey: "app", ID: ids[rng.IntN(len(ids))], Fn: fns[rng.IntN(len(fns))]})
			}
			_, _, err := s.UpdateCommands(ctx, us, nil)
			must(err)
		}
		if round%75 == 74 { // index entries set and deleted across sstables
			must(s.db.Flush())
		}
	}
	close(stop)
	<-done
	must(s.Barrier(ctx))
	// A full compaction meets every SingleDelete with what it deletes:
	// one that deleted a key Set twice would bring the older Set back.
	must(s.db.Compact(ctx, []byte{0}, []byte{0xff}, false))
	before := map[int64]store.Command{}
	for _, id := range ids {
		c, err := s.GetCommand(ctx, "app", id)
		must(err)
		stored, err := s.readCommand(id)
		must(err)
		if err := sameCommand(c, stored); err != nil {
			t.Errorf("command %d: cached and stored differ: %v", id, err)
		}
		before[id] = c
	}
	must(s.Close())
	s, err = Open(dir)
	must(err)
	defer s.Close()
	checkCommandIndex(t, s, before)
}

var errUnchangedTest = fmt.Errorf("unchanged")

// sameCommand compares two commands, results as compact JSON.
func sameCommand(a, b store.Command) error {
	ra, _ := json.Marshal(a.Result)
	rb, _ := json.Marshal(b.Result)
	a.Result, b.Result = ra, rb
	ma, _ := json.Marshal(a)
	mb, _ := json.Marshal(b)
	if !reflect.DeepEqual(ma, mb) {
		return fmt.Errorf("\n%s\n%s", ma, mb)
	}
	return nil
}

func checkCommandIndex(t *testing.T, s *Store, want map[int64]store.Command) {
	t.Helper()
	ctx := context.Background()
	open := map[string]bool{}
	due := map[string]bool{}
	for id, w := range want {
		c, err := s.GetCommand(ctx, "app", id)
		if err != nil {
			t.Fatalf("command %d after reopen: %v", id, err)
		}
		if err := sameCommand(c, w); err != nil {
			t.Errorf("command %d after reopen differs: %v", id, err)
		}
		if c.Open() {
			open[string(cmdOpenKey(c.AppKey, c.DeviceName, c.ID))] = true
			due[string(cmdDueKey(c.Due(), c.ID))] = true
		}
	}
	seen := func(prefix string, m map[string]bool) {
		n := 0
		must(t, s.scan([]byte(prefix), prefixEnd([]byte(prefix)), func(k, _ []byte) (bool, error) {
			n++
			if !m[string(k)] {
				t.Errorf("stray index entry %q (id %d)", k, binary.BigEndian.Uint64(k[len(k)-8:]))
			}
			return true, nil
		}))
		if n != len(m) {
			t.Errorf("%s: %d entries, want %d", prefix, n, len(m))
		}
	}
	seen(pCmdOpen, open)
	seen(pCmdDue, due)
}
