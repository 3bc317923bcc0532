package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jobWorker is the live node (0-based) whose metrics say it runs the
// jobs, -1 if none does.
func (c *testCluster) jobWorker() int {
	c.t.Helper()
	for i, p := range c.nodes {
		st, b, err := p.tryCall("", "", "GET", "/metrics", "")
		if err == nil && st == 200 && strings.Contains(string(b), "\ndevmsg_cluster_job_worker 1\n") {
			return i
		}
	}
	return -1
}

// TestClusterJobSurvivesItsNode runs two nodes on one Redis and a job
// over a thousand devices, offline (ttl 0: each command ends offline at
// once); the node running the job is killed with SIGKILL halfway. The
// other node takes the jobs' lease over and ends the job, and every
// target has exactly one command.
func TestClusterJobSurvivesItsNode(t *testing.T) {
	rdb := redisForTest(t, "--appendfsync", "always")
	c := &testCluster{t: t, acked: map[string]string{}}
	c.nodes = []*proc{startNode(t, rdb, 1), startNode(t, rdb, 2)}
	c.createApp(0)
	targets := int64(envInt(t, "DEVMSG_JOB_CRASH_TARGETS", 1000))
	for from := int64(0); from < targets; from += 500 {
		names := make([]string, min(500, targets-from))
		for i := range names {
			names[i] = fmt.Sprintf("cj-%05d", from+int64(i))
		}
		c.createDevices(0, names)
	}
	worker := -1
	waitFor(t, 30*time.Second, "a node to run the jobs", func() bool { worker = c.jobWorker(); return worker >= 0 })
	other := 1 - worker

	// targets×3 a minute: about 20 s in all.
	var created struct {
		JobID   int64 `json:"job_id"`
		Targets int64 `json:"targets"`
	}
	if err := json.Unmarshal(c.ok(other, "POST", "/job/v1/jobs",
		fmt.Sprintf(`{"seq_no":1,"target":{"all":true},"command":{"name":"reboot"},"ttl":0,"rollout":{"rate":%d}}`, min(targets*3, 1000000))), &created); err != nil || created.Targets != targets {
		t.Fatalf("create job: %+v %v", created, err)
	}
	var j jobView
	waitFor(t, 30*time.Second, "the job to reach a third of its targets", func() bool {
		_ = json.Unmarshal(c.ok(other, "GET", fmt.Sprintf("/job/v1/job?job_id=%d", created.JobID), ""), &j)
		return j.Counts["pending"] <= targets*2/3
	})
	if err := c.nodes[worker].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.nodes[worker].cmd.Wait()
	killedAt := targets - j.Counts["pending"]

	p := c.nodes[other]
	app := testApp{Key: c.key, MasterSecret: c.secret}
	j = waitJob(t, p, app, created.JobID, 90*time.Second)
	if j.State != "done" || j.Counts["offline"] != targets {
		t.Fatalf("job after its node was killed (at about %d started): %+v", killedAt, j)
	}
	done := commandsDone(t, p, app, created.JobID)
	var twice []string
	for d, n := range done {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s: %d commands", d, n))
		}
	}
	if int64(len(done)) != targets {
		t.Errorf("%d targets got a command, want %d", len(done), targets)
	}
	reportProblems(t, twice)
}
