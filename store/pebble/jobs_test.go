package pebble

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/devmsg/devmsg/store"
)

// startedJob makes app "app" with n devices and a running job 1 over
// them, and starts every target in steps of 100; command ids are
// 1 + the target's index.
func startedJob(t testing.TB, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	targets := make([]string, n)
	devs := make([]store.Device, n)
	for i := range targets {
		targets[i] = fmt.Sprint("dev-", i)
		devs[i] = store.Device{AppKey: "app", Name: targets[i], Secret: "s", TimeCreate: 1}
	}
	for i := 0; i < n; i += 1000 {
		if _, err := s.CreateDevices(ctx, "app", devs[i:min(i+1000, n)]); err != nil {
			t.Fatal(err)
		}
	}
	j := store.Job{ID: 1, AppKey: "app", State: store.JobRunning, Targets: int64(n), TTL: 60, Rate: 1000,
		Command: store.JobCommand{Name: "reboot", Params: []byte(`{"delay":5}`), Timeout: 30}, TimeCreate: 1}
	if err := s.CreateJob(ctx, j, targets, 0, nil); err != nil {
		t.Fatal(err)
	}
	const stepSize = 100
	for step := 0; step*stepSize < n; step++ {
		from, to := step*stepSize, min((step+1)*stepSize, n)
		starts := make([]store.JobStart, 0, to-from)
		for i := from; i < to; i++ {
			c := store.Command{ID: int64(i + 1), DeviceName: targets[i], Name: "reboot", Params: j.Command.Params,
				TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: 1000, Job: 1, JobIndex: int64(i), Attempt: 1}
			starts = append(starts, store.JobStart{Command: c, Prev: store.ExecPending})
		}
		if _, err := s.StartJob(ctx, "app", 1, int64(step), int64(to), starts); err != nil {
			t.Fatal(err)
		}
	}
}

// checkJobCounts checks that the job's counts are its executions by
// state, and that each execution is its command as stored.
func checkJobCounts(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	j, err := s.GetJob(ctx, "app", 1)
	must(t, err)
	ex, err := s.JobExecutions(ctx, "app", 1, "", 0, int(j.Targets)+1)
	must(t, err)
	want := map[string]int64{store.ExecPending: j.Targets - int64(len(ex))}
	for _, e := range ex {
		want[e.State]++
		c, err := s.GetCommand(ctx, "app", e.CmdID)
		must(t, err)
		if got := store.ExecutionOf(c); got != e {
			t.Fatalf("execution %+v, command %+v", e, got)
		}
	}
	store.FillCounts(&j, j.Counts) // drop zeroes
	if !maps.Equal(j.Counts, want) {
		t.Fatalf("counts %v, executions by state %v", j.Counts, want)
	}
	return want
}

// TestJobCrash: after a crash that loses the lazy writes not yet synced,
// the counts are the executions as stored, and each execution is its
// command as stored.
func TestJobCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s := openFS(t, fs)
	const n = 300
	startedJob(t, s, n)
	set := func(id int64, state string, lazy bool) {
		_, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error { c.State, c.Lazy = state, lazy; return nil })
		must(t, err)
	}
	for id := int64(1); id <= 100; id++ {
		set(id, store.CmdSent, true)
	}
	for id := int64(1); id <= 50; id++ {
		set(id, store.CmdDelivered, false)
	}
	must(t, s.Barrier(ctx))
	for id := int64(101); id <= 200; id++ {
		set(id, store.CmdSent, true) // lost to the crash
	}
	for id := int64(1); id <= 20; id++ {
		set(id, store.CmdSucceeded, false)
	}
	before := checkJobCounts(t, s)
	if before[store.CmdSent] < 50 || before[store.CmdSucceeded] != 20 {
		t.Fatalf("counts before the crash %v", before)
	}
	after := openFS(t, fs.CrashClone(vfs.CrashCloneCfg{}))
	got := checkJobCounts(t, after)
	if got[store.CmdSucceeded] != 20 || got[store.CmdDelivered] != 30 || got[store.CmdSent] < 50 {
		t.Fatalf("counts after the crash %v", got)
	}
}

// TestJobCountsWhileWriting: the first read after Open counts the
// executions while commands of the job are written; the counts it
// keeps are exact once the writes are done.
func TestJobCountsWhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, WithSweepInterval(0))
	must(t, err)
	const n = 2000
	startedJob(t, s, n)
	must(t, s.Close())
	s, err = Open(dir, WithSweepInterval(0))
	must(t, err)
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int64(w + 1); id <= n; id += 4 {
				if _, err := s.UpdateCommand(ctx, "app", id, func(c *store.Command) error { c.State, c.Lazy = store.CmdSent, id%2 == 0; return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 20 {
		if _, err := s.GetJob(ctx, "app", 1); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := checkJobCounts(t, s); got[store.CmdSent] != n {
		t.Fatalf("counts %v, want %d sent", got, n)
	}
}

// BenchmarkStartJob starts a job's 100,000 targets in steps of 1000 (a
// job runner's batches), reporting commands started per second and per
// second of the process's CPU (Pebble's flushes and compactions
// included), which a machine shared with other work changes less. The
// targets are in name order, as a fleet lists them; Shuffled, in none.
func BenchmarkStartJob(b *testing.B) {
	b.Run("Sorted", func(b *testing.B) { benchStartJob(b, "dev-%06d") })
	b.Run("Shuffled", func(b *testing.B) { benchStartJob(b, "dev-%d") })
}

func benchStartJob(b *testing.B, format string) {
	ctx := context.Background()
	const n, stepSize = 100_000, 1000
	s, err := Open(b.TempDir(), WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	targets := make([]string, n)
	devs := make([]store.Device, n)
	for i := range targets {
		targets[i] = fmt.Sprintf(format, i)
		devs[i] = store.Device{AppKey: "app", Name: targets[i], Secret: "s", TimeCreate: 1}
	}
	for i := 0; i < n; i += 1000 {
		if _, err := s.CreateDevices(ctx, "app", devs[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	var cmdID int64
	var cpu time.Duration
	b.ResetTimer()
	started := 0
	for job := int64(1); job <= int64(b.N); job++ {
		b.StopTimer()
		j := store.Job{ID: job, AppKey: "app", State: store.JobRunning, Targets: n, TTL: 60, Rate: 1000,
			Command: store.JobCommand{Name: "reboot", Params: []byte(`{"delay":5}`), Timeout: 30}, TimeCreate: 1}
		if err := s.CreateJob(ctx, j, targets, 0, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := s.GetJob(ctx, "app", job); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu -= processCPU()
		for step := 0; step*stepSize < n; step++ {
			from := step * stepSize
			starts := make([]store.JobStart, 0, stepSize)
			for i := from; i < from+stepSize; i++ {
				cmdID++
				c := store.Command{ID: cmdID, DeviceName: targets[i], Name: "reboot", Params: j.Command.Params,
					TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: 1000, Job: job, JobIndex: int64(i), Attempt: 1}
				starts = append(starts, store.JobStart{Command: c, Prev: store.ExecPending})
			}
			if _, err := s.StartJob(ctx, "app", job, int64(step), int64(from+stepSize), starts); err != nil {
				b.Fatal(err)
			}
			started += stepSize
		}
		cpu += processCPU()
		b.StopTimer()
		// Every command was admitted.
		jb, err := s.GetJob(ctx, "app", job)
		if err != nil || jb.Counts[store.CmdQueued] != n {
			b.Fatalf("counts %v, %v", jb.Counts, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(started)/b.Elapsed().Seconds(), "cmds/s")
	if cpu > 0 {
		b.ReportMetric(float64(started)/cpu.Seconds(), "cmds/cpu-s")
	}
}
