package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// commandTests check the Commands part of the contract.
var commandTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"Commands", testCommands},
	{"CommandsSeq", testCommandsSeq},
	{"CommandsAdmission", testCommandsAdmission},
	{"CommandsConcurrentLimit", testCommandsConcurrentLimit},
	{"CommandsLimitAfterEnds", testCommandsLimitAfterEnds},
	{"CommandUpdate", testCommandUpdate},
	{"CommandsDue", testCommandsDue},
	{"CommandsAdmissionMany", testCommandsAdmissionMany},
}

func cmd(id int64, dev string) store.Command {
	now := time.Now().UnixMilli()
	return store.Command{ID: id, DeviceName: dev, Name: "reboot", Params: []byte(`{"a":1}`), TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: now}
}

func testCommands(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1", "d2")
	mustDevices(t, s, "b", "d1")
	done := cmd(3, "d2")
	done.State, done.TimeDone = store.CmdOffline, done.TimeCreate
	out, err := s.CreateCommands(ctx, "a", []store.Command{cmd(1, "d1"), cmd(2, "d1"), done}, 0, nil)
	must(t, err)
	if len(out) != 3 || out[0].State != store.CmdQueued || out[2].State != store.CmdOffline || out[0].AppKey != "a" {
		t.Fatalf("CreateCommands returned %+v", out)
	}
	c, err := s.GetCommand(ctx, "a", 1)
	must(t, err)
	if c.Name != "reboot" || string(c.Params) != `{"a":1}` || c.DeviceName != "d1" || c.State != store.CmdQueued {
		t.Fatalf("GetCommand = %+v", c)
	}
	if _, err := s.GetCommand(ctx, "b", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another app's command: err %v, want not found", err)
	}
	if _, err := s.UpdateCommand(ctx, "b", 1, func(*store.Command) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update another app's command: err %v, want not found", err)
	}
	open, err := s.OpenCommands(ctx, "a", "d1", 10)
	must(t, err)
	if len(open) != 2 || open[0].ID != 1 || open[1].ID != 2 {
		t.Fatalf("OpenCommands = %+v, want 1 and 2", open)
	}
	if open, _ := s.OpenCommands(ctx, "a", "d2", 10); len(open) != 0 {
		t.Fatalf("an ended command is open: %+v", open)
	}
	last, err := s.LastCommandID(ctx)
	must(t, err)
	if last < 3 {
		t.Fatalf("LastCommandID = %d, want at least 3", last)
	}
}

func testCommandsSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	var seen []store.Command
	seq := func(cs []store.Command) *store.SeqEntry {
		seen = cs
		return &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte(fmt.Sprint(cs[0].ID, cs[0].State)), ExpiresAt: future()}
	}
	_, err := s.CreateCommands(ctx, "a", []store.Command{cmd(1, "d1")}, 7, seq)
	must(t, err)
	if len(seen) != 1 || seen[0].State != store.CmdQueued {
		t.Fatalf("seq was given %+v", seen)
	}
	e, err := s.GetSeq(ctx, "a", 7)
	must(t, err)
	if string(e.Body) != "1queued" {
		t.Fatalf("seq entry body %q", e.Body)
	}
	_, err = s.CreateCommands(ctx, "a", []store.Command{cmd(2, "d1")}, 7, seq)
	wantErr(t, "seq_no reused", err, store.ErrSeqUsed)
	if _, err := s.GetCommand(ctx, "a", 2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a command refused for its seq_no was stored: %v", err)
	}
}

func testCommandsAdmission(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	cmds := make([]store.Command, store.MaxOpenCommands+1)
	for i := range cmds {
		cmds[i] = cmd(int64(i+1), "d1")
	}
	cmds = append(cmds, cmd(1000, "gone"))
	out, err := s.CreateCommands(ctx, "a", cmds, 0, nil)
	must(t, err)
	for i, c := range out[:store.MaxOpenCommands] {
		if c.State != store.CmdQueued {
			t.Fatalf("command %d: %s, want queued", i, c.State)
		}
	}
	if c := out[store.MaxOpenCommands]; c.State != store.CmdRejected || c.Code != store.CodeQueueFull {
		t.Fatalf("command over the limit: %+v", c)
	}
	if c := out[len(out)-1]; c.State != store.CmdRejected || c.Code != store.CodeDeviceDeleted {
		t.Fatalf("command of a missing device: %+v", c)
	}
	if c, err := s.GetCommand(ctx, "a", int64(store.MaxOpenCommands+1)); err != nil || c.State != store.CmdRejected {
		t.Fatalf("rejected command stored as %+v, %v", c, err)
	}
}

// testCommandsLimitAfterEnds checks that the open-command limit follows
// the commands that end and those that are stored already ended: a full
// device takes exactly as many commands as ended.
func testCommandsLimitAfterEnds(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	cmds := make([]store.Command, store.MaxOpenCommands)
	for i := range cmds {
		cmds[i] = cmd(int64(i+1), "d1")
	}
	ended := cmd(500, "d1")
	ended.State, ended.TimeDone = store.CmdOffline, 1
	_, err := s.CreateCommands(ctx, "a", append(cmds, ended), 0, nil)
	must(t, err)
	for id := int64(1); id <= 3; id++ {
		_, err := s.UpdateCommand(ctx, "a", id, func(c *store.Command) error {
			c.State, c.TimeDone = store.CmdSucceeded, 10
			return nil
		})
		must(t, err)
	}
	_, err = s.UpdateCommand(ctx, "a", 4, func(c *store.Command) error {
		c.State, c.Deadline = store.CmdDelivered, 99 // still open
		return nil
	})
	must(t, err)
	more := []store.Command{cmd(601, "d1"), cmd(602, "d1"), cmd(603, "d1"), cmd(604, "d1")}
	out, err := s.CreateCommands(ctx, "a", more, 0, nil)
	must(t, err)
	for i, c := range out {
		want := store.CmdQueued
		if i == 3 {
			want = store.CmdRejected
		}
		if c.State != want {
			t.Fatalf("command %d after 3 of %d ended: %s, want %s", c.ID, store.MaxOpenCommands, c.State, want)
		}
	}
}

func testCommandsConcurrentLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	queued := 0
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				out, err := s.CreateCommands(ctx, "a", []store.Command{cmd(int64(w*100+i+1), "d1")}, 0, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if out[0].State == store.CmdQueued {
					mu.Lock()
					queued++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if queued != store.MaxOpenCommands {
		t.Fatalf("%d commands queued at once, want %d", queued, store.MaxOpenCommands)
	}
}

func testCommandUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	_, err := s.CreateCommands(ctx, "a", []store.Command{cmd(1, "d1"), cmd(2, "d1")}, 0, nil)
	must(t, err)
	c, err := s.UpdateCommand(ctx, "a", 1, func(c *store.Command) error {
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, 5, 99
		c.DeviceName = "other" // ignored
		return nil
	})
	must(t, err)
	if c.State != store.CmdDelivered || c.DeviceName != "d1" {
		t.Fatalf("after update: %+v", c)
	}
	_, err = s.UpdateCommand(ctx, "a", 1, func(c *store.Command) error {
		c.State, c.Code, c.Result = store.CmdSucceeded, 0, []byte(`{"ok":true}`)
		c.Emit = []store.Event{{Type: "command.done", Data: []byte(`{"cmd_id":"1"}`)}}
		return nil
	})
	must(t, err)
	open, err := s.OpenCommands(ctx, "a", "d1", 10)
	must(t, err)
	if len(open) != 1 || open[0].ID != 2 {
		t.Fatalf("open after the first ended: %+v", open)
	}
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10, Types: []string{"command.done"}})
	must(t, err)
	if len(p.Events) != 1 || p.Events[0].DeviceName != "d1" {
		t.Fatalf("events %+v, want the command.done emitted with the update", p.Events)
	}
	boom := errors.New("boom")
	_, err = s.UpdateCommand(ctx, "a", 2, func(c *store.Command) error { c.State = store.CmdFailed; return boom })
	wantErr(t, "fn error", err, boom)
	if c, _ := s.GetCommand(ctx, "a", 2); c.State != store.CmdQueued {
		t.Fatalf("a failed update was written: %+v", c)
	}
	if _, err := s.UpdateCommand(ctx, "a", 1, func(c *store.Command) error { c.State = store.CmdQueued; return nil }); err == nil {
		t.Fatal("an ended command opened again")
	}
}

func testCommandsDue(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	mustDevices(t, s, "b", "d1")
	old := cmd(1, "d1")
	old.TimeCreate, old.TTL = 1000, 0
	later := cmd(2, "d1")
	_, err := s.CreateCommands(ctx, "a", []store.Command{old, later}, 0, nil)
	must(t, err)
	other := cmd(3, "d1")
	other.TimeCreate, other.TTL = 2000, 0
	_, err = s.CreateCommands(ctx, "b", []store.Command{other}, 0, nil)
	must(t, err)
	due, err := s.DueCommands(ctx, 10000, 10)
	must(t, err)
	if len(due) != 2 || due[0].ID != 1 || due[1].ID != 3 || due[1].AppKey != "b" {
		t.Fatalf("DueCommands = %+v, want 1 then 3", due)
	}
	// Delivered: due at its deadline instead.
	_, err = s.UpdateCommand(ctx, "a", 1, func(c *store.Command) error {
		c.State, c.Deadline = store.CmdDelivered, 20000
		return nil
	})
	must(t, err)
	if due, _ := s.DueCommands(ctx, 10000, 10); len(due) != 1 || due[0].ID != 3 {
		t.Fatalf("DueCommands after delivery = %+v, want 3", due)
	}
	if due, _ := s.DueCommands(ctx, 20000, 10); len(due) != 2 {
		t.Fatalf("DueCommands at the deadline = %+v, want 1 and 3", due)
	}
	_, err = s.UpdateCommand(ctx, "b", 3, func(c *store.Command) error { c.State = store.CmdExpired; return nil })
	must(t, err)
	if due, _ := s.DueCommands(ctx, 20000, 10); len(due) != 1 || due[0].ID != 1 {
		t.Fatalf("DueCommands after one ended = %+v, want 1", due)
	}
}

// testCommandsAdmissionMany checks admission in a write to many devices,
// one of them full with the commands of earlier writes.
func testCommandsAdmissionMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d1")
	full := make([]store.Command, store.MaxOpenCommands)
	for i := range full {
		full[i] = cmd(int64(i+1), "d1")
	}
	_, err := s.CreateCommands(ctx, "a", full, 0, nil)
	must(t, err)
	var many []store.Command
	for i := range 12 {
		dev := fmt.Sprint("e", i)
		mustDevices(t, s, "a", dev)
		many = append(many, cmd(int64(2000+2*i), dev), cmd(int64(2001+2*i), "d1"))
	}
	many = append(many, cmd(3000, "gone"))
	out, err := s.CreateCommands(ctx, "a", many, 0, nil)
	must(t, err)
	for i, c := range out[:len(out)-1] {
		if want := []string{store.CmdQueued, store.CmdRejected}[i%2]; c.State != want {
			t.Fatalf("command %d to %s: %s, want %s", c.ID, c.DeviceName, c.State, want)
		}
	}
	if c := out[len(out)-1]; c.State != store.CmdRejected || c.Code != store.CodeDeviceDeleted {
		t.Fatalf("command to a missing device: %+v", c)
	}
}
