package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// jobFixture is an app with n devices d0000... and a running job 7 that
// targets them all.
func jobFixture(t testing.TB, s *Store, n int) (store.Job, []string) {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateApp(ctx, store.App{Key: "app"}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := 0; i < n; i += 1000 {
		devs := make([]store.Device, 0, 1000)
		for k := i; k < min(i+1000, n); k++ {
			names[k] = fmt.Sprintf("d%06d", k)
			devs = append(devs, store.Device{Name: names[k], Secret: "s"})
		}
		if _, err := s.CreateDevices(ctx, "app", devs); err != nil {
			t.Fatal(err)
		}
	}
	j := store.Job{ID: 7, AppKey: "app", State: store.JobRunning, Targets: int64(n),
		Command: store.JobCommand{Name: "reboot", Timeout: 30}, TTL: 60, Rate: 100, TimeCreate: 1}
	if err := s.CreateJob(ctx, j, names, 0, nil); err != nil {
		t.Fatal(err)
	}
	return j, names
}

// jobStarts are the first attempts of targets [from, to) of job j.
func jobStarts(j store.Job, names []string, from, to int, firstID int64) []store.JobStart {
	out := make([]store.JobStart, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, store.JobStart{Prev: store.ExecPending, Command: store.Command{
			ID: firstID + int64(i-from), AppKey: j.AppKey, DeviceName: names[i], Name: j.Command.Name, TTL: j.TTL,
			Timeout: j.Command.Timeout, State: store.CmdQueued, TimeCreate: 1, Job: j.ID, JobIndex: int64(i), Attempt: 1,
		}})
	}
	return out
}

// wantCounts fails unless the job's counts are want (ExecPending filled
// in) and match its executions as stored.
func wantCounts(t *testing.T, s *Store, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	j, err := s.GetJob(ctx, "app", 7)
	must(t, err)
	got := map[string]int64{}
	for st, n := range j.Counts {
		if n != 0 {
			got[st] = n
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	execs, err := s.JobExecutions(ctx, "app", 7, "", 0, int(j.Targets)+1)
	must(t, err)
	byState := map[string]int64{store.ExecPending: j.Targets - int64(len(execs))}
	for _, e := range execs {
		byState[e.State]++
		c, err := s.GetCommand(ctx, "app", e.CmdID)
		must(t, err)
		if store.ExecutionOf(c) != e {
			t.Fatalf("execution %+v, command says %+v", e, store.ExecutionOf(c))
		}
	}
	for st, n := range byState {
		if n != got[st] {
			t.Fatalf("%d executions %s, counted %d", n, st, got[st])
		}
		in, err := s.JobExecutions(ctx, "app", 7, st, 0, int(j.Targets)+1)
		must(t, err)
		if st != store.ExecPending && int64(len(in)) != n {
			t.Fatalf("state index %s holds %d, want %d", st, len(in), n)
		}
	}
}

func TestJobBasics(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	j, names := jobFixture(t, s, 10)
	got, err := s.JobTargets(ctx, "app", 7, 3, 4)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(names[3:7]) {
		t.Fatalf("targets %v", got)
	}
	if got, err := s.JobTargets(ctx, "app", 7, 8, 100); err != nil || len(got) != 2 {
		t.Fatalf("last targets %v %v", got, err)
	}
	if got, err := s.JobTargets(ctx, "app", 7, 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("no targets %v %v", got, err)
	}
	if _, err := s.JobTargets(ctx, "app", 8, 0, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("targets of no job: %v", err)
	}
	if _, err := s.JobExecutions(ctx, "app", 8, "", 0, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("executions of no job: %v", err)
	}
	if err := s.CreateJob(ctx, j, names, 0, nil); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	seq := &store.SeqEntry{Fingerprint: "f", Status: 201, Body: []byte(`{}`), ExpiresAt: 1 << 50}
	must(t, s.PutSeq(ctx, "app", 3, *seq))
	other := j
	other.ID = 8
	if err := s.CreateJob(ctx, other, names, 3, seq); !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("create with a used seq_no: %v", err)
	}
	if n, err := s.rdb.ZCard(ctx, s.activeJobsKey()).Result(); err != nil || n != 1 {
		t.Fatalf("index holds %d entries after a refused create: %v", n, err)
	}
	wantCounts(t, s, map[string]int64{store.ExecPending: 10})

	// A deleted device's command is stored rejected, with its execution.
	must(t, s.DeleteDevice(ctx, "app", names[1]))
	cmds, err := s.StartJob(ctx, "app", 7, 0, 4, jobStarts(j, names, 0, 4, 100))
	must(t, err)
	if cmds[1].State != store.CmdRejected || cmds[0].State != store.CmdQueued {
		t.Fatalf("stored %+v", cmds)
	}
	wantCounts(t, s, map[string]int64{store.ExecPending: 6, store.CmdQueued: 3, store.CmdRejected: 1})
	if _, err := s.StartJob(ctx, "app", 7, 0, 8, jobStarts(j, names, 4, 8, 200)); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("stale step: %v", err)
	}
	if _, err := s.GetCommand(ctx, "app", 200); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused step stored a command: %v", err)
	}
	got7, err := s.GetJob(ctx, "app", 7)
	must(t, err)
	if got7.Step != 1 || got7.Next != 4 {
		t.Fatalf("step %d next %d", got7.Step, got7.Next)
	}

	testJobRetry(t, s, j, names)
	testJobEnd(t, s)
}

// testJobRetry follows TestJobBasics: updates move the executions; a
// retry replaces its execution, and a late write of the attempt it
// replaced is left out.
func testJobRetry(t *testing.T, s *Store, j store.Job, names []string) {
	ctx := context.Background()
	for _, st := range []string{store.CmdSent, store.CmdDelivered, store.CmdFailed} {
		_, err := s.UpdateCommand(ctx, "app", 100, func(c *store.Command) error { c.State = st; c.Lazy = st == store.CmdSent; return nil })
		must(t, err)
	}
	wantCounts(t, s, map[string]int64{store.ExecPending: 6, store.CmdQueued: 2, store.CmdRejected: 1, store.CmdFailed: 1})
	retry := jobStarts(j, names, 0, 1, 300)
	retry[0].Command.Attempt, retry[0].Prev = 2, store.CmdFailed
	_, err := s.StartJob(ctx, "app", 7, 1, 4, retry)
	must(t, err)
	wantCounts(t, s, map[string]int64{store.ExecPending: 6, store.CmdQueued: 3, store.CmdRejected: 1})
	_, err = s.UpdateCommand(ctx, "app", 100, func(c *store.Command) error { c.Message = "late"; return nil })
	must(t, err)
	wantCounts(t, s, map[string]int64{store.ExecPending: 6, store.CmdQueued: 3, store.CmdRejected: 1})
	if e, err := s.JobExecutions(ctx, "app", 7, store.CmdQueued, 0, 1); err != nil || len(e) != 1 || e[0].CmdID != 300 || e[0].Attempt != 2 {
		t.Fatalf("first queued execution %+v %v", e, err)
	}
	if e, err := s.JobExecutions(ctx, "app", 7, store.CmdQueued, 1, 10); err != nil || len(e) != 2 || e[0].Index != 2 || e[1].Index != 3 {
		t.Fatalf("queued executions from 1: %+v %v", e, err)
	}

}

// testJobEnd follows testJobRetry: an ended job makes no step and stays
// Active until swept.
func testJobEnd(t *testing.T, s *Store) {
	ctx := context.Background()
	act, err := s.ActiveJobs(ctx)
	must(t, err)
	if len(act) != 1 || act[0].ID != 7 || act[0].Counts[store.CmdQueued] != 3 {
		t.Fatalf("active %+v", act)
	}
	_, err = s.UpdateJob(ctx, "app", 7, func(j *store.Job) error { j.State, j.Step, j.Next = store.JobCancelled, 99, 99; return nil })
	must(t, err)
	if _, err := s.StartJob(ctx, "app", 7, 2, 8, nil); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("step of a cancelled job: %v", err)
	}
	if act, err := s.ActiveJobs(ctx); err != nil || len(act) != 1 || act[0].Step != 2 || act[0].Next != 4 {
		t.Fatalf("active, unswept %+v %v", act, err)
	}
	_, err = s.UpdateJob(ctx, "app", 7, func(j *store.Job) error { j.Swept = true; return nil })
	must(t, err)
	if act, err := s.ActiveJobs(ctx); err != nil || len(act) != 0 {
		t.Fatalf("active, swept %+v %v", act, err)
	}
	if n, err := s.rdb.ZCard(ctx, s.activeJobsKey()).Result(); err != nil || n != 0 {
		t.Fatalf("index kept %d entries: %v", n, err)
	}
	_, err = s.UpdateJob(ctx, "app", 7, func(j *store.Job) error { j.State = store.JobRunning; return nil })
	if err == nil {
		t.Fatal("an ended job became active again")
	}
}

// TestJobCountsConcurrent moves a job's commands through their states
// from two clients of one Redis at once, each command by both, and checks
// the counts against the executions.
func TestJobCountsConcurrent(t *testing.T) {
	ctx := context.Background()
	a := openTest(t)
	b := open(t, standalone, a.prefix)
	t.Cleanup(func() { b.Close() })
	const n = 200
	j, names := jobFixture(t, a, n)
	_, err := a.StartJob(ctx, "app", 7, 0, n, jobStarts(j, names, 0, n, 1000))
	must(t, err)
	path := []string{store.CmdSent, store.CmdDelivered, store.CmdInProgress}
	var wg sync.WaitGroup
	for w, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				id := int64(1000 + i)
				for _, st := range path {
					_, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error {
						if !c.Open() {
							return nil
						}
						c.State = st
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
				end := store.CmdSucceeded
				if (i+w)%3 == 0 {
					end = store.CmdFailed
				}
				if _, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error {
					if c.Open() {
						c.State = end
					}
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := map[string]int64{}
	for i := range n {
		c, err := a.GetCommand(ctx, "app", int64(1000+i))
		must(t, err)
		want[c.State]++
	}
	wantCounts(t, a, want)
}

// TestStartJobConflict runs the same step from two clients at once, many
// times: each step is made by exactly one, and the other writes nothing.
func TestStartJobConflict(t *testing.T) {
	ctx := context.Background()
	a := openTest(t)
	b := open(t, standalone, a.prefix)
	t.Cleanup(func() { b.Close() })
	const n, per = 400, 20
	j, names := jobFixture(t, a, n)
	for step := range n / per {
		from := step * per
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[k] = s.StartJob(ctx, "app", 7, int64(step), int64(from+per), jobStarts(j, names, from, from+per, int64(100_000*(k+1)+from)))
			}()
		}
		wg.Wait()
		won := -1
		for k, err := range errs {
			switch {
			case err == nil && won == -1:
				won = k
			case err == nil:
				t.Fatalf("step %d made twice", step)
			case !errors.Is(err, store.ErrVersionConflict):
				t.Fatalf("step %d: %v", step, err)
			}
		}
		if won == -1 {
			t.Fatalf("step %d made by neither", step)
		}
		lost := int64(100_000*(2-won) + from)
		if _, err := a.GetCommand(ctx, "app", lost); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("step %d: the refused client stored command %d: %v", step, lost, err)
		}
	}
	got, err := a.GetJob(ctx, "app", 7)
	must(t, err)
	if got.Step != n/per || got.Next != n {
		t.Fatalf("step %d next %d", got.Step, got.Next)
	}
	wantCounts(t, a, map[string]int64{store.CmdQueued: n})
}

// BenchmarkStartJob measures StartJob steps of 1000 first attempts, each
// to its own device, with appendfsync always and everysec.
func BenchmarkStartJob(b *testing.B) {
	requireServer(b)
	admin := goredis.NewClient(&goredis.Options{Addr: standalone[0]})
	defer admin.Close()
	for _, fsync := range []string{"always", "everysec"} {
		if err := admin.ConfigSet(context.Background(), "appendfsync", fsync).Err(); err != nil {
			b.Fatal(err)
		}
		b.Run("fsync="+fsync+"/batch=1000", func(b *testing.B) {
			const batch = 1000
			s := open(b, standalone, newPrefix())
			defer s.Close()
			n := b.N * batch
			j, names := jobFixture(b, s, n)
			cpu := redisCPU(b, admin)
			b.ResetTimer()
			for i := range b.N {
				from := i * batch
				if _, err := s.StartJob(context.Background(), "app", j.ID, int64(i), int64(from+batch),
					jobStarts(j, names, from, from+batch, int64(from+1))); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "commands/s")
			// Redis's own CPU time per command: what bounds a shared
			// server, and unlike the time taken, not inflated by other
			// processes on a busy machine.
			b.ReportMetric((redisCPU(b, admin)-cpu)*1e6/float64(n), "redis-cpu-µs/command")
		})
	}
	if err := admin.ConfigSet(context.Background(), "appendfsync", "everysec").Err(); err != nil {
		b.Fatal(err)
	}
}

// TestCreateCommandsStaleRead runs the create script with admission's
// reads out of date: a device deleted since, and one whose open count
// moved. The script writes nothing and asks for a new read, and the
// commands are then stored as the devices now are.
func TestCreateCommandsStaleRead(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	j, names := jobFixture(t, s, 2)
	starts := jobStarts(j, names, 0, 2, 50)
	cmds := []store.Command{starts[0].Command, starts[1].Command}
	b := newCmdBatch("app", cmds)
	for _, stale := range [][2]int64{{1, 0}, {0, 1}} {
		exists := []*goredis.IntCmd{goredis.NewIntResult(stale[0], nil), goredis.NewIntResult(1, nil)}
		open := []*goredis.IntCmd{goredis.NewIntResult(stale[1], nil), goredis.NewIntResult(0, nil)}
		if stale[0] == 1 {
			must(t, s.DeleteDevice(ctx, "app", names[0]))
		}
		keys, args, err := s.createCommandsArgs(b, slices.Clone(cmds), 0, nil, &jobStep{ID: 7, Next: 2}, exists, open)
		must(t, err)
		if res, err := s.run(ctx, createCommandsScript, keys, args...).Int64(); err != nil || res != codeRetry {
			t.Fatalf("stale read %v: %d %v", stale, res, err)
		}
		if _, err := s.GetCommand(ctx, "app", 50); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused write stored a command: %v", err)
		}
	}
	out, err := s.StartJob(ctx, "app", 7, 0, 2, starts)
	must(t, err)
	if out[0].State != store.CmdRejected || out[0].Code != store.CodeDeviceDeleted || out[1].State != store.CmdQueued {
		t.Fatalf("stored %+v", out)
	}
	wantCounts(t, s, map[string]int64{store.CmdRejected: 1, store.CmdQueued: 1})
}

// redisCPU is the CPU time (s) the server has used, user and system.
func redisCPU(b *testing.B, admin *goredis.Client) float64 {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}

// TestCreateJobStaged creates a job with more targets than the script
// takes inline: they are staged, renamed into place without an expiry,
// and a refused job leaves no staged list behind.
func TestCreateJobStaged(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	n := 2*jobTargetsInline + 7
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("dev-%06d", i)
	}
	j := store.Job{ID: 1, AppKey: "app", State: store.JobScheduled, Targets: int64(n), TimeCreate: 1}
	must(t, s.CreateJob(ctx, j, names, 0, nil))
	for _, from := range []int{0, jobTargetsInline - 3, n - 5} {
		got, err := s.JobTargets(ctx, "app", 1, int64(from), 10)
		must(t, err)
		if want := names[from:min(from+10, n)]; !slices.Equal(got, want) {
			t.Fatalf("targets from %d: %v, want %v", from, got, want)
		}
	}
	if ttl, err := s.rdb.TTL(ctx, s.jobTargetsKey("app", 1)).Result(); err != nil || ttl != -1 {
		t.Fatalf("targets expire in %v: %v", ttl, err)
	}
	if err := s.CreateJob(ctx, j, names, 0, nil); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	seq := &store.SeqEntry{Fingerprint: "f", Status: 201, Body: []byte(`{}`), ExpiresAt: 1 << 50}
	must(t, s.PutSeq(ctx, "app", 3, *seq))
	j.ID = 2
	if err := s.CreateJob(ctx, j, names, 3, seq); !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("create with a used seq_no: %v", err)
	}
	staged, err := s.rdb.Keys(ctx, s.app("app")+"jtn:*").Result()
	if err != nil || len(staged) != 0 {
		t.Fatalf("staged lists left: %v %v", staged, err)
	}
	got, err := s.JobTargets(ctx, "app", 1, int64(n-1), 10)
	if err != nil || len(got) != 1 || got[0] != names[n-1] {
		t.Fatalf("targets changed by a refused create: %v %v", got, err)
	}
}

// BenchmarkUpdateJobCommand measures UpdateCommand of a job's commands,
// which also write their execution and move the job's counts, against
// the same updates of plain commands, from 16 goroutines, appendfsync
// everysec.
func BenchmarkUpdateJobCommand(b *testing.B) {
	requireServer(b)
	for _, kind := range []string{"job", "plain"} {
		b.Run(kind, func(b *testing.B) {
			const n = 4000
			ctx := context.Background()
			s := open(b, standalone, newPrefix())
			defer s.Close()
			j, names := jobFixture(b, s, n)
			starts := jobStarts(j, names, 0, n, 1)
			cmds := make([]store.Command, n)
			for i, st := range starts {
				cmds[i] = st.Command
				if kind == "plain" {
					cmds[i].Job, cmds[i].JobIndex, cmds[i].Attempt = 0, 0, 0
				}
			}
			for i := 0; i < n; i += 1000 {
				if _, err := s.CreateCommands(ctx, "app", cmds[i:i+1000], 0, nil); err != nil {
					b.Fatal(err)
				}
			}
			states := []string{store.CmdSent, store.CmdDelivered, store.CmdInProgress}
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					op := next.Add(1) - 1
					id, st := 1+op%n, states[(op/n)%3]
					if _, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error {
						c.State, c.Progress = st, int(op)
						return nil
					}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}

// TestJobExecBatchRules holds the batch path of executions to the rules
// of the single one: within a batch, and against what is stored, an
// execution of an earlier attempt never replaces a later one.
func TestJobExecBatchRules(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	j, names := jobFixture(t, s, 3)
	st := jobStarts(j, names, 0, 3, 10)
	second := st[0].Command
	second.ID, second.Attempt = 20, 2
	first := st[0].Command
	first.State = store.CmdFailed
	// Index 0: attempt 2 then attempt 1 in one batch; index 1 twice,
	// the later write winning; index 2 once.
	again := st[1].Command
	again.State = store.CmdSent
	_, err := s.CreateCommands(ctx, "app", []store.Command{second, first, st[1].Command, again, st[2].Command}, 0, nil)
	must(t, err)
	ex, err := s.JobExecutions(ctx, "app", 7, "", 0, 10)
	must(t, err)
	if len(ex) != 3 || ex[0].CmdID != 20 || ex[0].Attempt != 2 || ex[1].State != store.CmdSent {
		t.Fatalf("executions %+v", ex)
	}
	j2, err := s.GetJob(ctx, "app", 7)
	must(t, err)
	if j2.Counts[store.CmdQueued] != 2 || j2.Counts[store.CmdSent] != 1 || j2.Counts[store.CmdFailed] != 0 {
		t.Fatalf("counts %v", j2.Counts)
	}
	// Against what is stored: attempt 1 of index 0 again, in a batch.
	first.ID = 30
	_, err = s.CreateCommands(ctx, "app", []store.Command{first}, 0, nil)
	must(t, err)
	if ex, err := s.JobExecutions(ctx, "app", 7, "", 0, 1); err != nil || ex[0].CmdID != 20 {
		t.Fatalf("execution of index 0 %+v %v", ex, err)
	}
	if got, err := s.JobExecutions(ctx, "app", 7, store.CmdFailed, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("failed executions %+v %v", got, err)
	}
}
