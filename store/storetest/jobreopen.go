package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// jobReopen is the job RunReopenTests writes before closing the store:
// "kj"/1 over dev-1, dev-2, dev-3 (deleted) and dev-4, its first step
// made over the first three; dev-1's command succeeded, dev-2's sent
// (a lazy write, made durable by the synced writes after it).
type jobReopen struct {
	job     store.Job
	targets []string
}

func writeJobBeforeReopen(t *testing.T, s store.Store) *jobReopen {
	ctx := context.Background()
	mustDevices(t, s, "kj", "dev-1", "dev-2", "dev-3")
	must(t, s.DeleteDevice(ctx, "kj", "dev-3", store.Event{Type: "device.deleted", Time: 1}))
	targets := []string{"dev-1", "dev-2", "dev-3", "dev-4"}
	j := newJob("kj", 1, len(targets))
	must(t, s.CreateJob(ctx, j, targets, 0, nil))
	if _, err := s.UpdateJob(ctx, "kj", 1, func(j *store.Job) error { j.State = store.JobRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	starts := firstStarts(j, targets, 0, 3, 501)
	if _, err := s.StartJob(ctx, "kj", 1, 0, 3, starts); err != nil {
		t.Fatal(err)
	}
	set := func(id int64, state string, lazy bool) {
		_, err := s.UpdateCommand(ctx, "kj", id, func(c *store.Command) error {
			c.State, c.Lazy = state, lazy
			if state == store.CmdSucceeded {
				c.TimeDone = 9
			}
			return nil
		})
		must(t, err)
	}
	set(501, store.CmdSent, true)
	set(502, store.CmdSent, true)
	set(501, store.CmdDelivered, false)
	set(501, store.CmdSucceeded, false)
	return &jobReopen{job: j, targets: targets}
}

// checkJob checks the job, its targets, executions and exact counts
// after the reopen, and that its steps go on from there.
func (f *jobReopen) check(s store.Store) error {
	ctx := context.Background()
	j, err := s.GetJob(ctx, "kj", 1)
	if err != nil {
		return err
	}
	want := map[string]int64{store.CmdSucceeded: 1, store.CmdSent: 1, store.CmdRejected: 1, store.ExecPending: 1}
	if j.State != store.JobRunning || j.Next != 3 || j.Step != 1 || !sameCounts(j.Counts, want) {
		return fmt.Errorf("job %+v, want running at next 3, step 1, counts %v", j, want)
	}
	if got, err := s.JobTargets(ctx, "kj", 1, 1, 10); err != nil || !slices.Equal(got, f.targets[1:]) {
		return fmt.Errorf("targets %q %v", got, err)
	}
	ex, err := s.JobExecutions(ctx, "kj", 1, "", 0, 10)
	if err != nil {
		return err
	}
	var got []string
	for _, e := range ex {
		got = append(got, fmt.Sprintf("%d %d %s %d", e.Index, e.CmdID, e.State, e.Attempt))
	}
	if w := []string{"0 501 succeeded 1", "1 502 sent 1", "2 503 rejected 1"}; !slices.Equal(got, w) {
		return fmt.Errorf("executions %q, want %q", got, w)
	}
	act, err := s.ActiveJobs(ctx)
	if err != nil || len(act) != 1 || act[0].ID != 1 || !sameCounts(act[0].Counts, want) {
		return fmt.Errorf("active jobs %+v %v", act, err)
	}
	// The steps go on, and the counts with them.
	if _, err := s.StartJob(ctx, "kj", 1, 0, 4, nil); !errors.Is(err, store.ErrVersionConflict) {
		return fmt.Errorf("step 0 again after the reopen: %v", err)
	}
	if _, err := s.StartJob(ctx, "kj", 1, 1, 4, firstStarts(f.job, f.targets, 3, 4, 504)); err != nil {
		return err
	}
	if _, err := s.UpdateCommand(ctx, "kj", 502, func(c *store.Command) error { c.State = store.CmdDelivered; return nil }); err != nil {
		return err
	}
	j, err = s.GetJob(ctx, "kj", 1)
	want = map[string]int64{store.CmdSucceeded: 1, store.CmdDelivered: 1, store.CmdRejected: 2}
	if err != nil || !sameCounts(j.Counts, want) || j.Step != 2 {
		return fmt.Errorf("after a step and an update: %+v %v, want counts %v", j, err, want)
	}
	return nil
}
