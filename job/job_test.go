package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// fleet is a Router standing for delivery and the devices: an online
// device takes each command at once and answers it with the code its
// answer function gives (no answer when it reports false).
type fleet struct {
	svc    *command.Service
	mu     sync.Mutex
	online map[string]bool
	answer func(c store.Command) (code int, ok bool)
	got    map[string][]store.Command
	order  []time.Time
	clock  func() time.Time
}

func (f *fleet) CommandOnline(d store.Device) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.online[d.Name]
}

func (f *fleet) NotifyCommand(c store.Command, d store.Device) {
	f.mu.Lock()
	f.got[c.DeviceName] = append(f.got[c.DeviceName], c)
	f.order = append(f.order, f.clock())
	on, answer := f.online[c.DeviceName], f.answer
	f.mu.Unlock()
	if !on {
		return
	}
	ctx := context.Background()
	if _, err := f.svc.Sent(ctx, c.AppKey, c.ID); err != nil {
		panic(err)
	}
	if err := f.svc.Delivered(ctx, c.AppKey, c.DeviceName, c.ID); err != nil {
		panic(err)
	}
	if code, ok := answer(c); ok {
		if _, err := f.svc.Answer(ctx, c.AppKey, c.DeviceName, command.Reply{ID: c.ID, Code: code}); err != nil {
			panic(err)
		}
	}
}

func (f *fleet) CancelCommand(store.Command) {}

type fixture struct {
	t      *testing.T
	st     *memory.Store
	cmds   *command.Service
	fleet  *fleet
	runner *job.Runner
	svc    *job.Service
	app    store.App

	mu  sync.Mutex
	now time.Time
}

// newFixture makes an app with devices d0..d{n-1}, all online, tagged
// "even" or "odd" by their number.
func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	f := &fixture{t: t, st: memory.New(), app: store.App{Key: "app"}, now: time.UnixMilli(1_800_000_000_000)}
	ctx := context.Background()
	if err := f.st.CreateApp(ctx, f.app); err != nil {
		t.Fatal(err)
	}
	var devs []store.Device
	online := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		tag := "even"
		if i%2 == 1 {
			tag = "odd"
		}
		devs = append(devs, store.Device{AppKey: "app", Name: name, Tags: []string{tag}})
		online[name] = true
	}
	if _, err := f.st.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	ids, err := idgen.New(0)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	f.cmds = command.NewService(f.st, ids, log)
	f.cmds.SetClock(f.clock)
	f.fleet = &fleet{svc: f.cmds, online: online, got: map[string][]store.Command{}, clock: f.clock,
		answer: func(store.Command) (int, bool) { return 0, true }}
	f.cmds.SetRouter(f.fleet)
	f.runner = job.NewRunner(f.st, f.cmds, job.Config{}, log)
	f.runner.SetClock(f.clock)
	f.svc = job.NewService(f.st, ids, f.runner)
	f.svc.SetClock(f.clock)
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func spec(t job.Target) job.Spec {
	return job.Spec{Target: t, Command: store.JobCommand{Name: "ota", Timeout: 30}, TTL: 60, Rate: 1000000}
}

func (f *fixture) create(s job.Spec) store.Job {
	f.t.Helper()
	j, err := f.svc.Create(context.Background(), f.app, s, 0, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// run ticks the runner, a second of the clock apart, until j ends or
// after ticks ticks, and returns j as it is then.
func (f *fixture) run(j store.Job, ticks int) store.Job {
	f.t.Helper()
	ctx := context.Background()
	for range ticks {
		f.runner.Tick(ctx)
		var err error
		if j, err = f.svc.Get(ctx, "app", j.ID); err != nil {
			f.t.Fatal(err)
		}
		if !j.Active() {
			return j
		}
		f.advance(time.Second)
	}
	return j
}

func TestJobOnTagReachesExactlyTheTaggedEnabledDevices(t *testing.T) {
	f := newFixture(t, 20)
	ctx := context.Background()
	if _, err := f.st.UpdateDevice(ctx, "app", "d002", func(d *store.Device) error { d.Flag = store.FlagDisabled; return nil }); err != nil {
		t.Fatal(err)
	}
	j := f.create(spec(job.Target{Tag: "even"}))
	if j.Targets != 9 || j.State != store.JobRunning || j.Counts[store.ExecPending] != 9 {
		t.Fatalf("created %+v", j)
	}
	j = f.run(j, 10)
	if j.State != store.JobDone || j.Counts[store.CmdSucceeded] != 9 || j.Counts[store.ExecPending] != 0 {
		t.Fatalf("job ended %s with counts %v", j.State, j.Counts)
	}
	for i := range 20 {
		name := fmt.Sprintf("d%03d", i)
		want := 0
		if i%2 == 0 && i != 2 {
			want = 1
		}
		if got := len(f.fleet.got[name]); got != want {
			t.Errorf("%s got %d commands, want %d", name, got, want)
		}
	}
	page, err := f.st.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 1000, Types: []string{job.EventDone}})
	if err != nil || len(page.Events) != 1 {
		t.Fatalf("job.done events: %v %v", page.Events, err)
	}
	var done struct {
		JobID  string           `json:"job_id"`
		State  string           `json:"state"`
		Counts map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal(page.Events[0].Data, &done); err != nil || done.State != store.JobDone || done.Counts[store.CmdSucceeded] != 9 {
		t.Fatalf("job.done %s: %v", page.Events[0].Data, err)
	}
}

func TestRampStartsSlowlyAndSpeedsUp(t *testing.T) {
	f := newFixture(t, 400)
	s := spec(job.Target{All: true})
	s.Rate = 6000 // 100 a second at most
	s.Ramp = &store.JobRamp{Start: 60, Factor: 2, Every: 4}
	j := f.create(s)
	perSecond := []int{}
	for range 30 {
		before := len(f.fleet.order)
		j = f.run(j, 1) // a tick, then a second later
		perSecond = append(perSecond, len(f.fleet.order)-before)
	}
	first, later := 0, 0
	for i, n := range perSecond {
		if i < 3 {
			first += n
		}
		later = max(later, n)
	}
	if first > 4 || later < 50 {
		t.Fatalf("starts per second %v: the ramp did not start slowly and speed up", perSecond)
	}
	for i, n := range perSecond {
		if n > 100 {
			t.Fatalf("second %d started %d commands, more than rate/60 (100)", i, n)
		}
	}
}

func TestRateIsSpreadEvenly(t *testing.T) {
	f := newFixture(t, 100)
	s := spec(job.Target{All: true})
	s.Rate = 600 // 10 a second
	j := f.create(s)
	for i := range 5 {
		before := len(f.fleet.order)
		j = f.run(j, 1)
		if n := len(f.fleet.order) - before; n > 10 {
			t.Fatalf("second %d started %d commands, more than 10", i, n)
		}
	}
	if n := len(f.fleet.order); n < 40 || n > 51 {
		t.Fatalf("%d commands in 5 s at 10 a second", n)
	}
}

func TestAbortStopsEarlyAndCancelsWhatWasNotSent(t *testing.T) {
	f := newFixture(t, 100)
	for i := 50; i < 100; i++ {
		f.fleet.online[fmt.Sprintf("d%03d", i)] = false // their commands stay queued
	}
	f.fleet.answer = func(c store.Command) (int, bool) { return 1, true }
	s := spec(job.Target{All: true})
	s.Rate = 60 * 20 // 20 a second
	s.Abort = []store.JobAbort{{States: []string{store.CmdFailed}, Percent: 50, MinDone: 10}}
	j := f.create(s)
	j = f.run(j, 30)
	if j.State != store.JobAborted || j.AbortReason == "" {
		t.Fatalf("job %s (%q), counts %v", j.State, j.AbortReason, j.Counts)
	}
	if j.Counts[store.ExecPending] == 0 || j.Counts[store.CmdQueued] != 0 || j.Counts[store.CmdFailed] < 10 {
		t.Fatalf("aborted with counts %v: want targets left pending and nothing queued", j.Counts)
	}
	started := len(f.fleet.order)
	f.run(j, 3)
	if len(f.fleet.order) != started {
		t.Fatal("an aborted job started more commands")
	}
}

func TestRetriesMakeNewAttemptsForListedStatesOnly(t *testing.T) {
	f := newFixture(t, 10)
	f.fleet.answer = func(c store.Command) (int, bool) {
		if c.Attempt == 1 {
			return 7, true // the first attempt fails
		}
		return 0, true
	}
	s := spec(job.Target{All: true})
	s.Retries = map[string]int{store.CmdFailed: 2}
	j := f.run(f.create(s), 20)
	if j.State != store.JobDone || j.Counts[store.CmdSucceeded] != 10 {
		t.Fatalf("job %s, counts %v", j.State, j.Counts)
	}
	es, _, err := f.svc.Executions(context.Background(), "app", j.ID, "", 0, 100)
	if err != nil || len(es) != 10 {
		t.Fatalf("executions %v %v", es, err)
	}
	for _, e := range es {
		if e.Attempt != 2 || e.State != store.CmdSucceeded || len(f.fleet.got[e.DeviceName]) != 2 {
			t.Fatalf("execution %+v, commands %d", e, len(f.fleet.got[e.DeviceName]))
		}
	}

	// Retries of timed_out do not retry a failure.
	g := newFixture(t, 5)
	g.fleet.answer = func(store.Command) (int, bool) { return 7, true }
	s.Retries = map[string]int{store.CmdTimedOut: 3}
	j = g.run(g.create(s), 10)
	if j.State != store.JobDone || j.Counts[store.CmdFailed] != 5 {
		t.Fatalf("job %s, counts %v", j.State, j.Counts)
	}
	for d, cs := range g.fleet.got {
		if len(cs) != 1 {
			t.Fatalf("%s got %d commands", d, len(cs))
		}
	}
}

func TestPauseResumeCancel(t *testing.T) {
	f := newFixture(t, 50)
	ctx := context.Background()
	s := spec(job.Target{All: true})
	s.Rate = 600
	j := f.run(f.create(s), 1)
	p, err := f.svc.Pause(ctx, "app", j.ID)
	if err != nil || p.State != store.JobPaused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	n := len(f.fleet.order)
	f.run(j, 3)
	if len(f.fleet.order) != n {
		t.Fatal("a paused job started commands")
	}
	if _, err := f.svc.Pause(ctx, "app", j.ID); err == nil {
		t.Fatal("paused a paused job")
	}
	if r, err := f.svc.Resume(ctx, "app", j.ID); err != nil || r.State != store.JobRunning {
		t.Fatalf("resume: %+v %v", r, err)
	}
	f.run(j, 1)
	if len(f.fleet.order) <= n {
		t.Fatal("a resumed job started nothing")
	}
	c, err := f.svc.Cancel(ctx, "app", j.ID)
	if err != nil || c.State != store.JobCancelled || c.TimeDone == 0 {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	n = len(f.fleet.order)
	if j = f.run(j, 3); j.State != store.JobCancelled || len(f.fleet.order) != n || !j.Swept {
		t.Fatalf("after cancel: %s swept %v, %d more commands", j.State, j.Swept, len(f.fleet.order)-n)
	}
	if _, err := f.svc.Resume(ctx, "app", j.ID); err == nil {
		t.Fatal("resumed a cancelled job")
	}
	if again, err := f.svc.Cancel(ctx, "app", j.ID); err != nil || again.State != store.JobCancelled {
		t.Fatalf("cancel again: %+v %v", again, err)
	}
	if _, err := f.svc.Get(ctx, "other", j.ID); err == nil {
		t.Fatal("another app read the job")
	}
}

func TestStartAtWaits(t *testing.T) {
	f := newFixture(t, 5)
	s := spec(job.Target{All: true})
	s.StartAt = f.clock().Unix() + 10
	j := f.create(s)
	if j.State != store.JobScheduled {
		t.Fatalf("state %s", j.State)
	}
	j = f.run(j, 5)
	if j.State != store.JobScheduled || len(f.fleet.order) != 0 {
		t.Fatalf("started early: %s, %d commands", j.State, len(f.fleet.order))
	}
	j = f.run(j, 10)
	if j.State != store.JobDone || f.fleet.order[0].Unix() < s.StartAt {
		t.Fatalf("job %s, first command at %v", j.State, f.fleet.order)
	}
}

func TestTwoRunnersNeverStartAnAttemptTwice(t *testing.T) {
	f := newFixture(t, 300)
	other := job.NewRunner(f.st, f.cmds, job.Config{Step: 7}, slog.New(slog.DiscardHandler))
	other.SetClock(f.clock)
	f.fleet.answer = func(c store.Command) (int, bool) { return int(c.JobIndex % 2), true }
	s := spec(job.Target{All: true})
	s.Retries = map[string]int{store.CmdFailed: 1}
	j := f.create(s)
	ctx := context.Background()
	for range 20 {
		var wg sync.WaitGroup
		for _, r := range []*job.Runner{f.runner, other} {
			wg.Add(1)
			go func() { defer wg.Done(); r.Tick(ctx) }()
		}
		wg.Wait()
		f.advance(time.Second)
	}
	j, _ = f.svc.Get(ctx, "app", j.ID)
	if j.State != store.JobDone {
		t.Fatalf("job %s, counts %v", j.State, j.Counts)
	}
	for d, cs := range f.fleet.got {
		attempts := map[int]int{}
		for _, c := range cs {
			attempts[c.Attempt]++
		}
		for a, n := range attempts {
			if n != 1 {
				t.Fatalf("%s got %d commands for attempt %d", d, n, a)
			}
		}
	}
}

func TestSpecValidation(t *testing.T) {
	ok := spec(job.Target{All: true})
	for _, c := range []struct {
		name  string
		edit  func(*job.Spec)
		field string
	}{
		{"rate 0", func(s *job.Spec) { s.Rate = 0 }, "rollout.rate"},
		{"rate too high", func(s *job.Spec) { s.Rate = 1000001 }, "rollout.rate"},
		{"ramp factor", func(s *job.Spec) { s.Ramp = &store.JobRamp{Start: 10, Factor: 1, Every: 1} }, "rollout.ramp.factor"},
		{"ramp start above rate", func(s *job.Spec) { s.Rate = 10; s.Ramp = &store.JobRamp{Start: 20, Factor: 2, Every: 1} }, "rollout.ramp.start"},
		{"ramp every", func(s *job.Spec) { s.Ramp = &store.JobRamp{Start: 10, Factor: 2} }, "rollout.ramp.every"},
		{"abort state", func(s *job.Spec) { s.Abort = []store.JobAbort{{States: []string{"queued"}, Percent: 5}} }, "abort[0].states"},
		{"abort percent", func(s *job.Spec) { s.Abort = []store.JobAbort{{States: []string{"failed"}, Percent: 5.555}} }, "abort[0].percent"},
		{"retries", func(s *job.Spec) { s.Retries = map[string]int{"failed": 11} }, "retries.failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ok
			c.edit(&s)
			err := s.Validate()
			if err == nil || !containsField(err, c.field) {
				t.Fatalf("got %v, want an error on %s", err, c.field)
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestLargeParamsMakeSmallSteps: each command keeps its own copy of the
// job's params, so a job with large params starts its commands in steps
// of a few MiB of params, not of a thousand commands.
func TestLargeParamsMakeSmallSteps(t *testing.T) {
	f := newFixture(t, 40)
	s := spec(job.Target{All: true})
	s.Command.Params = json.RawMessage(`"` + strings.Repeat("x", 200<<10) + `"`)
	j := f.create(s)
	f.runner.Tick(context.Background()) // the first command
	f.advance(time.Second)
	f.runner.Tick(context.Background()) // a second's worth: the other 39
	j, err := f.svc.Get(context.Background(), "app", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	// After the first, 39 commands in steps of 20 (4 MiB / 200 KiB).
	if j.Step != 3 || j.Next != 40 {
		t.Fatalf("two ticks made %d steps to %d targets, want 3 steps to 40", j.Step, j.Next)
	}
}
