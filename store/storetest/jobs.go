package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// jobTests check the Jobs part of the contract. Their names all start
// with "Job" (see SkipJobs).
var jobTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"JobCreate", testJobCreate},
	{"JobUpdate", testJobUpdate},
	{"JobStart", testJobStart},
	{"JobStartRace", testJobStartRace},
	{"JobUpdateDuringSteps", testJobUpdateDuringSteps},
	{"JobExecutionFollowsCommand", testJobExecutionFollowsCommand},
	{"JobExecutionFollowsBatch", testJobExecutionFollowsBatch},
	{"JobRetry", testJobRetry},
	{"JobExecutions", testJobExecutions},
	{"JobActive", testJobActive},
}

// newJob is a job of app with the given targets, as the service accepts
// it: scheduled, nothing started.
func newJob(app string, id int64, targets int) store.Job {
	return store.Job{
		ID: id, AppKey: app, State: store.JobScheduled, Tag: "floor-1", Targets: int64(targets),
		Command: store.JobCommand{Name: "reboot", Params: []byte(`{"delay":5}`), Timeout: 30},
		TTL:     60, Rate: 100, Ramp: &store.JobRamp{Start: 10, Factor: 2, Every: 5},
		Abort:      []store.JobAbort{{States: []string{store.CmdFailed}, Percent: 20, MinDone: 10}},
		Retries:    map[string]int{store.CmdFailed: 2},
		TimeCreate: 1000 + id,
	}
}

// jobCmd is attempt of the job's command to target index of device dev.
func jobCmd(cmdID int64, j store.Job, index int64, dev string, attempt int) store.Command {
	c := cmd(cmdID, dev)
	c.Name, c.Params, c.Timeout, c.TTL = j.Command.Name, j.Command.Params, j.Command.Timeout, j.TTL
	c.Job, c.JobIndex, c.Attempt = j.ID, index, attempt
	return c
}

// firstStarts are the first attempts of targets[from:to] of j, command
// ids from firstID on.
func firstStarts(j store.Job, targets []string, from, to int, firstID int64) []store.JobStart {
	var out []store.JobStart
	for i := from; i < to; i++ {
		out = append(out, store.JobStart{Command: jobCmd(firstID+int64(i-from), j, int64(i), targets[i], 1)})
	}
	return out
}

func mustCreateJob(t *testing.T, s store.Store, j store.Job, targets []string) {
	t.Helper()
	must(t, s.CreateJob(context.Background(), j, targets, 0, nil))
}

// setJobState moves the job to state.
func setJobState(t *testing.T, s store.Store, app string, id int64, state string) store.Job {
	t.Helper()
	j, err := s.UpdateJob(context.Background(), app, id, func(j *store.Job) error { j.State = state; return nil })
	must(t, err)
	return j
}

// getJob reads the job and checks that its Counts sum to its Targets.
func getJob(t *testing.T, s store.Store, app string, id int64) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), app, id)
	must(t, err)
	if err := countsSum(j); err != nil {
		t.Fatal(err)
	}
	return j
}

func countsSum(j store.Job) error {
	var n int64
	for st, c := range j.Counts {
		if c < 0 {
			return fmt.Errorf("job %d: count of %s is %d", j.ID, st, c)
		}
		n += c
	}
	if n != j.Targets {
		return fmt.Errorf("job %d: counts %v sum to %d, want %d", j.ID, j.Counts, n, j.Targets)
	}
	return nil
}

// sameCounts compares counts, leaving out zeroes.
func sameCounts(got, want map[string]int64) bool {
	nz := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	return maps.Equal(nz(got), nz(want))
}

func wantCounts(t *testing.T, s store.Store, app string, id int64, want map[string]int64) store.Job {
	t.Helper()
	j := getJob(t, s, app, id)
	if !sameCounts(j.Counts, want) {
		t.Fatalf("job %d counts %v, want %v", id, j.Counts, want)
	}
	return j
}

func testJobCreate(t *testing.T, s store.Store) {
	ctx := context.Background()
	targets := []string{"d3", "d1", "d2", "d0", "d4"}
	j := newJob("a", 7, len(targets))
	seq := &store.SeqEntry{Fingerprint: "f", Status: 202, Body: []byte(`{"job_id":"7"}`), ExpiresAt: future()}
	must(t, s.CreateJob(ctx, j, targets, 11, seq))
	if e, err := s.GetSeq(ctx, "a", 11); err != nil || string(e.Body) != `{"job_id":"7"}` {
		t.Fatalf("seq entry %+v, %v", e, err)
	}
	wantErr(t, "seq_no reused", s.CreateJob(ctx, newJob("a", 8, 1), []string{"x"}, 11, seq), store.ErrSeqUsed)
	if _, err := s.GetJob(ctx, "a", 8); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a job refused for its seq_no was stored: %v", err)
	}
	wantErr(t, "id in use", s.CreateJob(ctx, newJob("a", 7, 1), []string{"x"}, 12, seq), store.ErrAlreadyExists)
	if _, err := s.GetSeq(ctx, "a", 12); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the seq_no of a refused job was recorded: %v", err)
	}
	if err := s.CreateJob(ctx, newJob("a", 9, 3), []string{"x"}, 0, nil); err == nil {
		t.Fatal("a job with fewer targets than it says was stored")
	}
	got := wantCounts(t, s, "a", 7, map[string]int64{store.ExecPending: 5})
	got.Counts = nil
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("GetJob = %+v, want %+v", got, j)
	}
	if _, err := s.GetJob(ctx, "b", 7); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another app's job: %v, want not found", err)
	}
	checkTargets(t, s, targets)
}

// checkTargets checks the targets of job "a"/7 read by parts.
func checkTargets(t *testing.T, s store.Store, targets []string) {
	for _, c := range []struct {
		from  int64
		limit int
		want  []string
	}{
		{0, 100, targets}, {0, 2, targets[:2]}, {2, 2, targets[2:4]}, {3, 100, targets[3:]}, {5, 10, nil}, {9, 10, nil},
	} {
		got, err := s.JobTargets(context.Background(), "a", 7, c.from, c.limit)
		must(t, err)
		if len(got) != len(c.want) || len(got) > 0 && !slices.Equal(got, c.want) {
			t.Fatalf("JobTargets(%d, %d) = %q, want %q", c.from, c.limit, got, c.want)
		}
	}
}

func testJobUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, newJob("a", 1, 2), []string{"d1", "d2"})
	if _, err := s.UpdateJob(ctx, "a", 2, func(*store.Job) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update a missing job: %v", err)
	}
	if _, err := s.UpdateJob(ctx, "b", 1, func(*store.Job) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update another app's job: %v", err)
	}
	j, err := s.UpdateJob(ctx, "a", 1, func(j *store.Job) error {
		j.State, j.Rate = store.JobRunning, 500
		j.ID, j.AppKey, j.Targets, j.Next, j.Step = 99, "b", 9, 5, 5 // all ignored
		j.Emit = []store.Event{{Type: "job.started", Time: 3, Data: []byte(`{"job_id":"1"}`)}}
		return nil
	})
	must(t, err)
	want := newJob("a", 1, 2)
	want.State, want.Rate = store.JobRunning, 500
	for _, got := range []store.Job{j, getJob(t, s, "a", 1)} {
		if !sameCounts(got.Counts, map[string]int64{store.ExecPending: 2}) {
			t.Fatalf("counts %v, want 2 pending", got.Counts)
		}
		got.Counts = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after the update: %+v, want %+v", got, want)
		}
	}
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10})
	must(t, err)
	if len(p.Events) != 1 || p.Events[0].AppKey != "a" {
		t.Fatalf("events %+v, want the job.started the update emitted", p.Events)
	}
	must(t, sameEvent(p.Events[0], store.Event{ID: p.Events[0].ID, Type: "job.started", AppKey: "a", Time: 3, Data: []byte(`{"job_id":"1"}`)}))
	testJobUpdateRefused(t, s)
}

// testJobUpdateRefused checks that a refused update of "a"/1 (running,
// one event in the log) writes nothing.
func testJobUpdateRefused(t *testing.T, s store.Store) {
	ctx := context.Background()
	boom := errors.New("boom")
	_, err := s.UpdateJob(ctx, "a", 1, func(j *store.Job) error {
		j.State = store.JobPaused
		j.Emit = []store.Event{{Type: "job.paused", Time: 4}}
		return boom
	})
	wantErr(t, "fn error", err, boom)
	if got := getJob(t, s, "a", 1); got.State != store.JobRunning || got.Rate != 500 {
		t.Fatalf("a failed update was written: %+v", got)
	}
	if p, _ := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10}); len(p.Events) != 1 {
		t.Fatalf("a failed update appended events: %+v", p.Events)
	}
	setJobState(t, s, "a", 1, store.JobCancelled)
	if _, err := s.UpdateJob(ctx, "a", 1, func(j *store.Job) error { j.State = store.JobRunning; return nil }); err == nil {
		t.Fatal("an ended job became active again")
	}
	if got := getJob(t, s, "a", 1); got.State != store.JobCancelled || got.Swept {
		t.Fatalf("after a refused update: %+v", got)
	}
	j, err := s.UpdateJob(ctx, "a", 1, func(j *store.Job) error { j.Swept, j.TimeDone = true, 77; return nil })
	must(t, err)
	if got := getJob(t, s, "a", 1); !got.Swept || got.TimeDone != 77 || got.State != store.JobCancelled || j.Active() {
		t.Fatalf("after the sweep: %+v", got)
	}
}

// startFixture makes a running job "a"/1 over d0, d1, gone (no such
// device), full (100 commands open) and d2..d5.
func startFixture(t *testing.T, s store.Store) (store.Job, []string) {
	_, targets := jobFixture(t, s)
	return setJobState(t, s, "a", 1, store.JobRunning), targets
}

// jobFixture is startFixture with the job left scheduled.
func jobFixture(t *testing.T, s store.Store) (store.Job, []string) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d0", "d1", "full", "d2", "d3", "d4", "d5")
	open := make([]store.Command, store.MaxOpenCommands)
	for i := range open {
		open[i] = cmd(int64(9000+i), "full")
	}
	_, err := s.CreateCommands(ctx, "a", open, 0, nil)
	must(t, err)
	targets := []string{"d0", "d1", "gone", "full", "d2", "d3", "d4", "d5"}
	j := newJob("a", 1, len(targets))
	mustCreateJob(t, s, j, targets)
	return j, targets
}

func testJobStart(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := jobFixture(t, s)
	starts := firstStarts(j, targets, 0, 4, 1)
	starts[0].Command.Emit = []store.Event{{Type: "command.created", Time: 5}}

	// Not running: nothing written.
	if _, err := s.StartJob(ctx, "a", 1, 0, 4, starts); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("start a scheduled job: %v, want ErrVersionConflict", err)
	}
	if _, err := s.StartJob(ctx, "a", 2, 0, 4, starts); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("start a missing job: %v, want ErrNotFound", err)
	}
	if _, err := s.GetCommand(ctx, "a", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused step wrote its command: %v", err)
	}
	setJobState(t, s, "a", 1, store.JobRunning)
	out, err := s.StartJob(ctx, "a", 1, 0, 4, starts)
	must(t, err)
	var states []string
	for _, c := range out {
		states = append(states, fmt.Sprint(c.AppKey, c.ID, c.State, c.Code))
	}
	if want := []string{"a1queued0", "a2queued0", "a3rejected3007", "a4rejected3004"}; !slices.Equal(states, want) {
		t.Fatalf("StartJob returned %q, want %q", states, want)
	}
	if c, err := s.GetCommand(ctx, "a", 3); err != nil || c.State != store.CmdRejected || c.Job != 1 || c.JobIndex != 2 || c.Attempt != 1 {
		t.Fatalf("stored command %+v, %v", c, err)
	}
	if open, _ := s.OpenCommands(ctx, "a", "d0", 10); len(open) != 1 || open[0].ID != 1 || open[0].Job != 1 {
		t.Fatalf("open commands of d0: %+v", open)
	}
	got := wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 2, store.CmdRejected: 2, store.ExecPending: 4})
	if got.Next != 4 || got.Step != 1 {
		t.Fatalf("after the step: next %d step %d, want 4 and 1", got.Next, got.Step)
	}
	ex, err := s.JobExecutions(ctx, "a", 1, "", 0, 100)
	must(t, err)
	want := []store.Execution{
		{Index: 0, DeviceName: "d0", CmdID: 1, State: store.CmdQueued, Attempt: 1},
		{Index: 1, DeviceName: "d1", CmdID: 2, State: store.CmdQueued, Attempt: 1},
		{Index: 2, DeviceName: "gone", CmdID: 3, State: store.CmdRejected, Code: store.CodeDeviceDeleted, Attempt: 1, TimeDone: out[2].TimeDone},
		{Index: 3, DeviceName: "full", CmdID: 4, State: store.CmdRejected, Code: store.CodeQueueFull, Attempt: 1, TimeDone: out[3].TimeDone},
	}
	if !slices.Equal(ex, want) {
		t.Fatalf("executions %+v, want %+v", ex, want)
	}
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Types: []string{"command.created"}, Limit: 10})
	must(t, err)
	if len(p.Events) != 1 || p.Events[0].DeviceName != "d0" {
		t.Fatalf("events %+v, want the command.created of d0", p.Events)
	}
	testJobStartNext(t, s, j, targets)
}

// testJobStartNext goes on from testJobStart's first step.
func testJobStartNext(t *testing.T, s store.Store, j store.Job, targets []string) {
	ctx := context.Background()
	// The same step again, or a later one: refused, nothing written.
	again := firstStarts(j, targets, 4, 6, 5)
	for _, step := range []int64{0, 2} {
		if _, err := s.StartJob(ctx, "a", 1, step, 6, again); !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("step %d when the job is at 1: %v, want ErrVersionConflict", step, err)
		}
	}
	if _, err := s.GetCommand(ctx, "a", 5); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused step wrote its command: %v", err)
	}
	if got := getJob(t, s, "a", 1); got.Next != 4 || got.Step != 1 || got.Counts[store.ExecPending] != 4 {
		t.Fatalf("a refused step moved the job: %+v", got)
	}
	// Paused: refused too.
	setJobState(t, s, "a", 1, store.JobPaused)
	if _, err := s.StartJob(ctx, "a", 1, 1, 6, again); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("start a paused job: %v, want ErrVersionConflict", err)
	}
	setJobState(t, s, "a", 1, store.JobRunning)
	if _, err := s.StartJob(ctx, "a", 1, 1, 6, again); err != nil {
		t.Fatal(err)
	}
	got := wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 4, store.CmdRejected: 2, store.ExecPending: 2})
	if got.Next != 6 || got.Step != 2 {
		t.Fatalf("after the second step: next %d step %d, want 6 and 2", got.Next, got.Step)
	}
	// An empty step moves Next and Step only.
	if _, err := s.StartJob(ctx, "a", 1, 2, 6, nil); err != nil {
		t.Fatal(err)
	}
	if got := getJob(t, s, "a", 1); got.Next != 6 || got.Step != 3 {
		t.Fatalf("after an empty step: %+v", got)
	}
}

// testJobStartRace checks that of runners making the same step at
// once, exactly one succeeds.
func testJobStartRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := startFixture(t, s)
	const runners = 6
	var wg sync.WaitGroup
	errs := make([]error, runners)
	for r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = s.StartJob(ctx, "a", 1, 0, 2, firstStarts(j, targets, 0, 2, int64(1+10*r)))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrVersionConflict):
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Fatalf("%d runners made step 0, want 1", won)
	}
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 2, store.ExecPending: 6})
	if open, _ := s.OpenCommands(ctx, "a", "d0", 10); len(open) != 1 {
		t.Fatalf("d0 has %d commands open, want 1", len(open))
	}
}

// testJobUpdateDuringSteps checks that updates of a job made while its
// steps are written lose none of the steps' Next and Step, nor the
// steps their updates.
func testJobUpdateDuringSteps(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := startFixture(t, s)
	done := make(chan error, 1)
	go func() {
		for i := range len(targets) {
			if _, err := s.StartJob(ctx, "a", 1, int64(i), int64(i+1), firstStarts(j, targets, i, i+1, int64(i+1))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for r := int64(1); r <= 20; r++ {
		if _, err := s.UpdateJob(ctx, "a", 1, func(j *store.Job) error { j.Rate = r; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	must(t, <-done)
	got := wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 6, store.CmdRejected: 2})
	if got.Next != int64(len(targets)) || got.Step != int64(len(targets)) || got.Rate != 20 {
		t.Fatalf("after steps and updates at once: next %d step %d rate %d", got.Next, got.Step, got.Rate)
	}
}

// updateCmd moves command id to state (lazily when lazy).
func updateCmd(t *testing.T, s store.Store, id int64, state string, lazy bool) store.Command {
	t.Helper()
	c, err := s.UpdateCommand(context.Background(), "a", id, func(c *store.Command) error {
		c.State, c.Lazy = state, lazy
		switch state {
		case store.CmdDelivered:
			c.TimeDelivered, c.Deadline = 10, time.Now().Add(time.Minute).UnixMilli()
		case store.CmdSucceeded, store.CmdFailed, store.CmdTimedOut:
			c.TimeDone = 20
			c.Code = map[string]int{store.CmdFailed: 7}[state]
		}
		return nil
	})
	must(t, err)
	return c
}

// execution returns the job's execution at index, failing if it has none.
func execution(t *testing.T, s store.Store, id, index int64) store.Execution {
	t.Helper()
	ex, err := s.JobExecutions(context.Background(), "a", id, "", index, 1)
	must(t, err)
	if len(ex) != 1 || ex[0].Index != index {
		t.Fatalf("execution %d: %+v", index, ex)
	}
	return ex[0]
}

func testJobExecutionFollowsCommand(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := startFixture(t, s)
	_, err := s.StartJob(ctx, "a", 1, 0, 2, firstStarts(j, targets, 0, 2, 1))
	must(t, err)
	pending := int64(len(targets) - 2)
	steps := []struct {
		state string
		lazy  bool
	}{{store.CmdSent, true}, {store.CmdDelivered, false}, {store.CmdSucceeded, false}}
	for _, st := range steps {
		updateCmd(t, s, 1, st.state, st.lazy)
		wantCounts(t, s, "a", 1, map[string]int64{st.state: 1, store.CmdQueued: 1, store.ExecPending: pending})
		e := execution(t, s, 1, 0)
		if e.State != st.state || e.CmdID != 1 || e.Attempt != 1 || e.DeviceName != "d0" {
			t.Fatalf("execution after %s: %+v", st.state, e)
		}
		if ex, _ := s.JobExecutions(ctx, "a", 1, st.state, 0, 10); len(ex) != 1 || ex[0].CmdID != 1 {
			t.Fatalf("executions in %s: %+v", st.state, ex)
		}
	}
	if e := execution(t, s, 1, 0); e.TimeDone != 20 {
		t.Fatalf("ended execution %+v, want its time_done", e)
	}
	// A failed update writes no execution either.
	boom := errors.New("boom")
	_, err = s.UpdateCommand(ctx, "a", 2, func(c *store.Command) error { c.State = store.CmdFailed; return boom })
	wantErr(t, "fn error", err, boom)
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdSucceeded: 1, store.CmdQueued: 1, store.ExecPending: pending})
	// A job command's job fields stay.
	c, err := s.UpdateCommand(ctx, "a", 2, func(c *store.Command) error { c.Job, c.JobIndex, c.Attempt = 5, 5, 5; return nil })
	must(t, err)
	if c.Job != 1 || c.JobIndex != 1 || c.Attempt != 1 {
		t.Fatalf("an update moved the command out of its job: %+v", c)
	}
	if e := execution(t, s, 1, 1); e.CmdID != 2 || e.Attempt != 1 {
		t.Fatalf("execution 1: %+v", e)
	}
}

func testJobRetry(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := startFixture(t, s)
	_, err := s.StartJob(ctx, "a", 1, 0, 2, firstStarts(j, targets, 0, 2, 1))
	must(t, err)
	updateCmd(t, s, 1, store.CmdSent, true)
	updateCmd(t, s, 1, store.CmdDelivered, false)
	updateCmd(t, s, 1, store.CmdFailed, false)
	pending := int64(len(targets) - 2)
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdFailed: 1, store.CmdQueued: 1, store.ExecPending: pending})
	if e := execution(t, s, 1, 0); e.State != store.CmdFailed || e.Code != 7 {
		t.Fatalf("failed execution %+v", e)
	}
	// Attempt 2 of index 0, with the first attempt of index 2 ("gone").
	retry := store.JobStart{Command: jobCmd(50, j, 0, "d0", 2)}
	starts := append([]store.JobStart{retry}, firstStarts(j, targets, 2, 3, 51)...)
	out, err := s.StartJob(ctx, "a", 1, 1, 3, starts)
	must(t, err)
	if out[0].State != store.CmdQueued || out[0].Attempt != 2 || out[1].State != store.CmdRejected {
		t.Fatalf("StartJob returned %+v", out)
	}
	got := wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 2, store.CmdRejected: 1, store.ExecPending: pending - 1})
	if got.Next != 3 || got.Step != 2 {
		t.Fatalf("after the retry step: %+v", got)
	}
	e := execution(t, s, 1, 0)
	if e.CmdID != 50 || e.Attempt != 2 || e.State != store.CmdQueued || e.Code != 0 || e.TimeDone != 0 {
		t.Fatalf("execution after the retry: %+v", e)
	}
	// A late write of the first attempt (ended) leaves the execution to
	// the latest attempt.
	_, err = s.UpdateCommand(ctx, "a", 1, func(c *store.Command) error { c.Message = "late"; return nil })
	must(t, err)
	if e := execution(t, s, 1, 0); e.CmdID != 50 || e.Attempt != 2 || e.State != store.CmdQueued {
		t.Fatalf("execution after a write of the earlier attempt: %+v", e)
	}
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 2, store.CmdRejected: 1, store.ExecPending: pending - 1})
	updateCmd(t, s, 50, store.CmdSucceeded, false)
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdSucceeded: 1, store.CmdQueued: 1, store.CmdRejected: 1, store.ExecPending: pending - 1})
}

func testJobExecutions(t *testing.T, s store.Store) {
	ctx := context.Background()
	j, targets := startFixture(t, s)
	_, err := s.StartJob(ctx, "a", 1, 0, int64(len(targets)), firstStarts(j, targets, 0, len(targets), 1))
	must(t, err)
	// Queued: 0, 1, 4, 5, 6, 7; rejected: 2, 3. Succeed 4 and 6.
	updateCmd(t, s, 5, store.CmdSucceeded, false)
	updateCmd(t, s, 7, store.CmdSucceeded, false)
	idx := func(ex []store.Execution) []int64 {
		var out []int64
		for _, e := range ex {
			out = append(out, e.Index)
		}
		return out
	}
	for _, c := range []struct {
		state string
		from  int64
		limit int
		want  []int64
	}{
		{"", 0, 100, []int64{0, 1, 2, 3, 4, 5, 6, 7}},
		{"", 3, 2, []int64{3, 4}},
		{"", 7, 5, []int64{7}},
		{"", 8, 5, nil},
		{store.CmdQueued, 0, 100, []int64{0, 1, 5, 7}},
		{store.CmdQueued, 2, 2, []int64{5, 7}},
		{store.CmdQueued, 6, 1, []int64{7}},
		{store.CmdRejected, 0, 1, []int64{2}},
		{store.CmdSucceeded, 0, 100, []int64{4, 6}},
		{store.CmdFailed, 0, 100, nil},
	} {
		ex, err := s.JobExecutions(ctx, "a", 1, c.state, c.from, c.limit)
		must(t, err)
		if !slices.Equal(idx(ex), c.want) {
			t.Fatalf("JobExecutions(%q, %d, %d) = %v, want %v", c.state, c.from, c.limit, idx(ex), c.want)
		}
		for _, e := range ex {
			if e.DeviceName != targets[e.Index] || e.CmdID != e.Index+1 {
				t.Fatalf("execution %+v of target %s", e, targets[e.Index])
			}
		}
	}
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdQueued: 4, store.CmdRejected: 2, store.CmdSucceeded: 2})
}

func testJobActive(t *testing.T, s store.Store) {
	ctx := context.Background()
	if act, err := s.ActiveJobs(ctx); err != nil || len(act) != 0 {
		t.Fatalf("ActiveJobs of an empty store: %+v, %v", act, err)
	}
	for _, id := range []int64{4, 2, 1, 3} {
		mustCreateJob(t, s, newJob("a", id, 1), []string{"d"})
	}
	mustCreateJob(t, s, newJob("b", 5, 1), []string{"d"})
	setJobState(t, s, "a", 3, store.JobRunning)
	setJobState(t, s, "a", 2, store.JobDone)
	setJobState(t, s, "a", 4, store.JobAborted)
	_, err := s.UpdateJob(ctx, "a", 4, func(j *store.Job) error { j.Swept = true; return nil })
	must(t, err)
	setJobState(t, s, "b", 5, store.JobPaused)
	act, err := s.ActiveJobs(ctx)
	must(t, err)
	var got []string
	for _, j := range act {
		got = append(got, fmt.Sprint(j.AppKey, j.ID, j.State))
		if err := countsSum(j); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a1scheduled", "a2done", "a3running", "b5paused"}
	if !slices.Equal(got, want) {
		t.Fatalf("ActiveJobs = %v, want %v", got, want)
	}
	_, err = s.UpdateJob(ctx, "a", 2, func(j *store.Job) error { j.Swept = true; return nil })
	must(t, err)
	if act, _ := s.ActiveJobs(ctx); len(act) != 3 {
		t.Fatalf("ActiveJobs after a sweep: %+v", act)
	}
}
