package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestUpdateCommands checks a batch of command updates: two of one
// command applied in order, an unknown id and an fn error reported per
// update, the due index moved and an ended command out of the device's
// open count.
func TestUpdateCommands(t *testing.T) {
	s, must := openTestApp(t, "d1", "d2")
	ctx := context.Background()
	var cmds []store.Command
	for id := int64(1); id <= 3; id++ {
		cmds = append(cmds, store.Command{ID: id, DeviceName: "d1", Name: "x", TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: 1000})
	}
	_, err := s.CreateCommands(ctx, "app", cmds, 0, nil)
	must(err)
	sent := func(c *store.Command) error {
		if c.State != store.CmdQueued {
			return errors.New("unchanged")
		}
		c.State, c.TimeSent, c.Lazy = store.CmdSent, 2000, true
		return nil
	}
	delivered := func(c *store.Command) error {
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, 3000, 33000
		return nil
	}
	boom := errors.New("boom")
	// The write is readable when visible is called, before its fsync.
	var visible []string
	seen := func() {
		c, err := s.GetCommand(ctx, "app", 3)
		must(err)
		visible = append(visible, c.State)
	}
	out, errs, err := s.UpdateCommands(ctx, []store.CommandUpdate{
		{AppKey: "app", ID: 1, Fn: sent},
		{AppKey: "app", ID: 1, Fn: delivered},
		{AppKey: "app", ID: 99, Fn: sent},
		{AppKey: "app", ID: 2, Fn: func(*store.Command) error { return boom }},
		{AppKey: "app", ID: 3, Fn: func(c *store.Command) error {
			c.State, c.TimeDone = store.CmdSucceeded, 4000
			c.Emit = []store.Event{{Type: "command.done", Time: 4000, Data: []byte(`{}`)}}
			return nil
		}},
	}, seen)
	must(err)
	if len(visible) != 1 || visible[0] != store.CmdSucceeded {
		t.Fatalf("visible saw command 3 as %v, want called once with it succeeded", visible)
	}
	if errs[0] != nil || errs[1] != nil || errs[4] != nil || !errors.Is(errs[2], store.ErrNotFound) || !errors.Is(errs[3], boom) {
		t.Fatalf("errors %v", errs)
	}
	if out[1].State != store.CmdDelivered || out[1].TimeSent != 2000 || out[1].TimeDelivered != 3000 {
		t.Fatalf("command 1 returned as %+v", out[1])
	}
	for id, want := range map[int64]string{1: store.CmdDelivered, 2: store.CmdQueued, 3: store.CmdSucceeded} {
		c, err := s.GetCommand(ctx, "app", id)
		must(err)
		if c.State != want {
			t.Fatalf("command %d stored as %s, want %s", id, c.State, want)
		}
	}
	due, err := s.DueCommands(ctx, 1<<50, 10)
	must(err)
	if len(due) != 2 || due[0].ID != 1 || due[0].Due() != 33000 || due[1].ID != 2 {
		t.Fatalf("due commands %+v", due)
	}
	if n, err := s.openCount("app", "d1"); err != nil || n != 2 {
		t.Fatalf("open count %d, %v; want 2", n, err)
	}
	open, err := s.OpenCommands(ctx, "app", "d1", 10)
	must(err)
	if len(open) != 2 {
		t.Fatalf("open commands %+v", open)
	}
}
