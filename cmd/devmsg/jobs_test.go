package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// job creates a job and returns its id and targets.
func (f *fleet) job(body string) (id, targets int64) {
	f.t.Helper()
	st, b := f.rest("POST", "/job/v1/jobs", body)
	var c struct {
		JobID   int64 `json:"job_id"`
		Targets int64 `json:"targets"`
	}
	if st != 200 || json.Unmarshal(b, &c) != nil {
		f.t.Fatalf("create job: %d %s", st, b)
	}
	return c.JobID, c.Targets
}

// waitJobEnd polls job id until it ends, and returns it then.
func (f *fleet) waitJobEnd(id int64, timeout time.Duration) jobView {
	f.t.Helper()
	var j jobView
	waitFor(f.t, timeout, fmt.Sprintf("job %d to end", id), func() bool {
		st, b := f.rest("GET", fmt.Sprintf("/job/v1/job?job_id=%d", id), "")
		if st != 200 || json.Unmarshal(b, &j) != nil {
			f.t.Fatalf("GET job: %d %s", st, b)
		}
		return j.State == "done" || j.State == "aborted" || j.State == "cancelled"
	})
	return j
}

// TestJobsWithSimulatedDevices runs jobs on `devmsg sim` devices over
// MQTT, as a user would watch one on a laptop: an ota job on a tag ends
// done with every tagged device's answer and nobody else's, and an ota
// job on every device with a quarter of them failing aborts at its
// threshold and cancels what it had not sent.
func TestJobsWithSimulatedDevices(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startSim(12, "jsim-", "--quiet", "--fail-rate", "0.25", "--ota-time", "200ms", "--mqtt-version", "5")
	for i := 1; i <= 12; i += 2 {
		if st, b := f.rest("POST", "/device/v1/tags", fmt.Sprintf(`{"device_name":"jsim-%04d","tags":["canary"]}`, i)); st != 200 {
			t.Fatalf("tag: %d %s", st, b)
		}
	}

	id, targets := f.job(`{"seq_no":1,"target":{"tag":"canary"},"command":{"name":"ping","params":{"v":1},"timeout":10},"ttl":30,"rollout":{"rate":600}}`)
	if targets != 6 {
		t.Fatalf("a job on tag canary has %d targets, want 6", targets)
	}
	j := f.waitJobEnd(id, 30*time.Second)
	if j.State != "done" || j.Counts["succeeded"] != 6 || j.TimeDone == 0 {
		t.Fatalf("ping job: %+v", j)
	}
	st, b := f.rest("GET", fmt.Sprintf("/job/v1/job/executions?job_id=%d", id), "")
	var page struct {
		Executions []execView `json:"executions"`
	}
	if st != 200 || json.Unmarshal(b, &page) != nil || len(page.Executions) != 6 {
		t.Fatalf("executions: %d %s", st, b)
	}
	for _, e := range page.Executions {
		var n int
		if _, err := fmt.Sscanf(e.DeviceName, "jsim-%04d", &n); err != nil || n%2 != 1 || e.State != "succeeded" || e.Attempt != 1 {
			t.Fatalf("execution %+v", e)
		}
		if v := f.cmdState(e.CmdID, 0); v.State != "succeeded" || string(v.Result) != `{"v":1}` {
			t.Fatalf("command of %s: %+v", e.DeviceName, v)
		}
	}

	// 3 of 12 fail ota; the job aborts once more than 10% of at least 4
	// ended executions failed. 60 a minute: one a second, so the abort
	// comes long before the last target.
	id, _ = f.job(`{"seq_no":2,"target":{"all":true},"command":{"name":"ota","params":{"version":"2.0"},"timeout":10},"ttl":30,
		"rollout":{"rate":60},"abort":[{"states":["failed"],"percent":10,"min_done":4}]}`)
	j = f.waitJobEnd(id, 60*time.Second)
	if j.State != "aborted" || !strings.Contains(j.AbortReason, "failed") || j.Counts["pending"] == 0 {
		t.Fatalf("ota job with a quarter failing: %+v", j)
	}
	st, b = f.rest("GET", "/event/v1/events?types=job.done", "")
	if st != 200 || !strings.Contains(string(b), `"state":"aborted"`) || !strings.Contains(string(b), `"state":"done"`) {
		t.Fatalf("job.done events: %d %s", st, b)
	}
}

// TestJobRampWithRealDevices measures a ramp on `devmsg sim` devices
// from the commands' creation times: the first commands come about one
// every 0.5 s (120 a minute), and once every two succeeded double the
// rate, the last ones come many to a second.
func TestJobRampWithRealDevices(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startSim(40, "jramp-", "--quiet")

	id, _ := f.job(`{"seq_no":1,"target":{"all":true},"command":{"name":"ping"},"ttl":30,
		"rollout":{"rate":6000,"ramp":{"start":120,"factor":2,"every":2}}}`)
	if j := f.waitJobEnd(id, 60*time.Second); j.State != "done" || j.Counts["succeeded"] != 40 {
		t.Fatalf("ramp job: %+v", j)
	}
	st, b := f.rest("GET", fmt.Sprintf("/job/v1/job/executions?job_id=%d&limit=1000", id), "")
	var page struct {
		Executions []execView `json:"executions"`
	}
	if st != 200 || json.Unmarshal(b, &page) != nil || len(page.Executions) != 40 {
		t.Fatalf("executions: %d %s", st, b)
	}
	created := make([]int64, 0, 40)
	for _, e := range page.Executions {
		var v cmdView
		f.restOK("GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", e.CmdID), "", &v)
		created = append(created, v.TimeCreate)
	}
	slices.Sort(created)
	first := created[3] - created[0]  // three gaps, at 120 a minute then 240: over 1 s
	last := created[39] - created[30] // nine gaps, at 16 times that rate or more
	if first < 700 || last*4 > first*9 {
		t.Fatalf("command creation times (ms from the first) %v: the first 4 took %d ms, the last 10 %d ms", offsets(created), first, last)
	}
	t.Logf("the first 4 commands took %d ms, the last 10 %d ms", first, last)
}

func offsets(ts []int64) []int64 {
	out := make([]int64, len(ts))
	for i, v := range ts {
		out[i] = v - ts[0]
	}
	return out
}
