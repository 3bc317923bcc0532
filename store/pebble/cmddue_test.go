package pebble

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TestDueCommandsFloor checks that DueCommands, which scans the due
// index from where its last scan found the first entry, still finds an
// entry written below that point, and that its periodic full scan finds
// one the floor passed over.
func TestDueCommandsFloor(t *testing.T) {
	s, create := dueStore(t)
	ctx := context.Background()
	due := func(before int64) []int64 {
		t.Helper()
		cmds, err := s.DueCommands(ctx, before, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, c := range cmds {
			ids = append(ids, c.ID)
		}
		return ids
	}
	end := func(id int64) {
		t.Helper()
		if _, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error {
			c.State, c.TimeDone = store.CmdExpired, c.Due()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	const later = 1_000_000
	a := create(1, 10_000)
	create(2, later)
	if got := due(a.Due()); len(got) != 1 || got[0] != 1 {
		t.Fatalf("due at %d: %v, want [1]", a.Due(), got)
	}
	end(1)
	if got := due(a.Due()); len(got) != 0 {
		t.Fatalf("due at %d after the end of 1: %v", a.Due(), got)
	}
	if s.due.at.Load() != a.Due()+1 {
		t.Fatalf("floor %d after an empty scan to %d, want %d", s.due.at.Load(), a.Due(), a.Due()+1)
	}
	// A command due before the floor lowers it as it is written.
	create(3, 5_000)
	if got := due(later); len(got) != 1 || got[0] != 3 {
		t.Fatalf("due at %d: %v, want [3]", later, got)
	}
	// An entry below the floor that no write lowered it for (a write
	// racing a scan) is found by the next full scan.
	end(3)
	create(4, 7_000)
	s.due.at.Store(later)
	if got := due(later); len(got) != 0 {
		t.Fatalf("due at %d from a floor past 4: %v, want none", later, got)
	}
	s.due.lastFull.Store(0)
	if got := due(later); len(got) != 1 || got[0] != 4 {
		t.Fatalf("full scan at %d: %v, want [4]", later, got)
	}
	if c := create(5, 6_000); s.due.at.Load() != c.Due() {
		t.Fatalf("floor %d, want the due of 5, %d", s.due.at.Load(), c.Due())
	}
}

// dueStore opens a store with an app "app" and its device "d", and
// returns it with a function that creates a queued command of d.
func dueStore(t *testing.T) (*Store, func(id, at int64) store.Command) {
	t.Helper()
	s, _ := openTestApp(t, "d")
	ctx := context.Background()
	return s, func(id, at int64) store.Command {
		t.Helper()
		out, err := s.CreateCommands(ctx, "app", []store.Command{{ID: id, DeviceName: "d", Name: "n", State: store.CmdQueued, TimeCreate: at}}, 0, nil)
		if err != nil || out[0].State != store.CmdQueued {
			t.Fatalf("create command %d: %v %+v", id, err, out)
		}
		return out[0]
	}
}

// TestDueCommandsClockBack checks that a wall clock set back does not
// put off the full scan of the due index until it catches up with when
// the last one ran.
func TestDueCommandsClockBack(t *testing.T) {
	s, create := dueStore(t)
	ctx := context.Background()
	if _, err := s.DueCommands(ctx, 1, 10); err != nil { // the first, full
		t.Fatal(err)
	}
	c := create(1, 5_000)
	// A write that raced a scan left the floor past c; and the last full
	// scan ran, by the clock, an hour from now: the clock was set back.
	s.due.at.Store(1_000_000)
	s.due.lastFull.Store(time.Now().Add(time.Hour).UnixNano())
	got, err := s.DueCommands(ctx, 1_000_000, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != c.ID {
		t.Fatalf("due after the clock went back: %+v, want command %d", got, c.ID)
	}
}

// TestDueCommandsNegativeFloor checks that a floor below zero (a due
// before 1970, or a scan to the largest time) does not start a scan past
// every entry: due keys sort as unsigned, a negative due after all
// others.
func TestDueCommandsNegativeFloor(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		lower func(s *Store, create func(id, at int64) store.Command)
	}{
		{"a negative due", func(_ *Store, create func(id, at int64) store.Command) { create(2, -100_000) }},
		{"a scan to the largest time", func(s *Store, _ func(id, at int64) store.Command) {
			if _, err := s.DueCommands(ctx, math.MaxInt64, 1); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, create := dueStore(t)
			if _, err := s.DueCommands(ctx, 1, 10); err != nil { // the first, full
				t.Fatal(err)
			}
			tc.lower(s, create)
			c := create(1, 5_000)
			got, err := s.DueCommands(ctx, 1_000_000, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].ID != c.ID {
				t.Fatalf("floor %d: due %+v, want command %d", s.due.at.Load(), got, c.ID)
			}
		})
	}
}
