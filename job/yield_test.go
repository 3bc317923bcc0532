package job_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/devmsg/devmsg/job"
)

// TestBusyGivesWayAtTheYieldRate: while single sends or commands are
// being made, the jobs start at most YieldRate commands a second, in
// steps of at most YieldStep, however often the runner looks.
func TestBusyGivesWayAtTheYieldRate(t *testing.T) {
	f := newFixture(t, 3000)
	r := job.NewRunner(f.st, f.cmds, job.Config{Busy: func() bool { return true }, YieldStep: 100, YieldRate: 2000},
		slog.New(slog.DiscardHandler))
	r.SetClock(f.clock)
	f.create(spec(job.Target{All: true}))
	ctx := context.Background()
	// A second of looks 50 ms apart, then ten 5 ms apart.
	for i := range 30 {
		before := len(f.fleet.order)
		r.Tick(ctx)
		n := len(f.fleet.order) - before
		if n > 100 || (i > 20 && n > 10) {
			t.Fatalf("look %d started %d commands", i, n)
		}
		if i < 20 {
			f.advance(50 * time.Millisecond)
		} else {
			f.advance(5 * time.Millisecond)
		}
	}
	// 2,000/s over 1.05 s, less the job pace's first look (one command).
	if n := len(f.fleet.order); n < 1900 || n > 2101 {
		t.Fatalf("%d commands started in 1.05 s at 2,000 a second", n)
	}
}
