package job_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/store"
)

// An ended job with many commands queued for offline devices is swept
// a bounded number of commands a poll, so that one app's cancel does
// not hold every other job up until its last command is cancelled.
func TestSweepIsSpreadOverPolls(t *testing.T) {
	f := newFixture(t, 30)
	for name := range f.fleet.online {
		f.fleet.online[name] = false // every command stays queued
	}
	f.runner = job.NewRunner(f.st, f.cmds, job.Config{SweepStep: 7}, slog.New(slog.DiscardHandler))
	f.runner.SetClock(f.clock)
	ids, err := idgen.New(2)
	if err != nil {
		t.Fatal(err)
	}
	f.svc = job.NewService(f.st, ids, f.runner)
	f.svc.SetClock(f.clock)
	j := f.run(f.create(spec(job.Target{All: true})), 3)
	if j.Counts[store.CmdQueued] != 30 {
		t.Fatalf("counts %v: want 30 queued", j.Counts)
	}
	ctx := context.Background()
	if j, err = f.svc.Cancel(ctx, "app", j.ID); err != nil {
		t.Fatal(err)
	}
	for poll := 1; j.Active(); poll++ {
		if poll > 10 {
			t.Fatalf("not swept after %d polls: counts %v", poll, j.Counts)
		}
		f.runner.Tick(ctx)
		if j, err = f.svc.Get(ctx, "app", j.ID); err != nil {
			t.Fatal(err)
		}
		want := int64(max(0, 30-7*poll))
		if got := j.Counts[store.CmdQueued]; got != want {
			t.Fatalf("after poll %d: %d queued, want %d (7 cancelled a poll)", poll, got, want)
		}
	}
	if j.State != store.JobCancelled || j.Counts[store.CmdCancelled] != 30 {
		t.Fatalf("job %s with counts %v: want cancelled, 30 cancelled", j.State, j.Counts)
	}
}
