package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/devmsg/devmsg/apitypes"
)

// jobView is a job document as the API answers it, execView one
// execution as GET /job/v1/job/executions lists it.
type (
	jobView  = apitypes.Job
	execView = apitypes.JobExecution
)

// createDevicesIn creates n devices named prefix0... in chunks of the
// batch API's size and returns their names and secrets.
func createDevicesIn(t *testing.T, p *proc, app testApp, prefix string, n int) (names, secrets []string) {
	t.Helper()
	for from := 0; from < n; from += 1000 {
		k := min(1000, n-from)
		reqs := make([]string, k)
		for i := range reqs {
			reqs[i] = fmt.Sprintf(`{"name":"%s%d"}`, prefix, from+i)
			names = append(names, fmt.Sprint(prefix, from+i))
		}
		st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(reqs, ",")+`]}`)
		var cr struct {
			Resp []struct {
				DeviceSecret string `json:"device_secret"`
			}
		}
		if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != k {
			t.Fatalf("create devices: %d %.300s", st, body)
		}
		for _, r := range cr.Resp {
			secrets = append(secrets, r.DeviceSecret)
		}
	}
	return names, secrets
}

// getJob reads job id.
func getJob(t *testing.T, p *proc, app testApp, id int64) jobView {
	t.Helper()
	st, b := p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/job/v1/job?job_id=%d", id), "")
	var j jobView
	if st != 200 || json.Unmarshal(b, &j) != nil {
		t.Fatalf("GET job %d: %d %s", id, st, b)
	}
	return j
}

// waitJob polls job id until it leaves the running states or timeout
// passes, and returns it as it is then.
func waitJob(t *testing.T, p *proc, app testApp, id int64, timeout time.Duration) jobView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := getJob(t, p, app, id)
		if j.State == "done" || j.State == "cancelled" || j.State == "aborted" || time.Now().After(deadline) {
			return j
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jobExecutions lists every execution of job id, page by page.
func jobExecutions(t *testing.T, p *proc, app testApp, id int64, state string) []execView {
	t.Helper()
	var out []execView
	cursor := ""
	for {
		st, b := p.call(t, app.Key, app.MasterSecret, "GET",
			fmt.Sprintf("/job/v1/job/executions?job_id=%d&state=%s&limit=1000&cursor=%s", id, state, cursor), "")
		var page struct {
			Executions []execView `json:"executions"`
			Next       string     `json:"next"`
		}
		if st != 200 || json.Unmarshal(b, &page) != nil {
			t.Fatalf("GET executions of job %d: %d %.300s", id, st, b)
		}
		out = append(out, page.Executions...)
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// commandsDone counts the command.done events of job id in the app's
// event log, by device.
func commandsDone(t *testing.T, p *proc, app testApp, id int64) map[string]int {
	t.Helper()
	out := map[string]int{}
	want := strconv.FormatInt(id, 10)
	after := ""
	for {
		st, b := p.call(t, app.Key, app.MasterSecret, "GET", "/event/v1/events?types=command.done&limit=1000&after="+after, "")
		var page struct {
			Events []struct {
				DeviceName string `json:"device_name"`
				Data       struct {
					JobID string `json:"job_id"`
				} `json:"data"`
			} `json:"events"`
			Next string `json:"next"`
		}
		if st != 200 || json.Unmarshal(b, &page) != nil {
			t.Fatalf("GET events: %d %.300s", st, b)
		}
		for _, e := range page.Events {
			if e.Data.JobID == want {
				out[e.DeviceName]++
			}
		}
		// A filtered read examines a bounded number of events: it may
		// return none and still move on. The end is a cursor that stays.
		if page.Next == after {
			return out
		}
		after = page.Next
	}
}

// TestJobCrashLoop runs a job over a few thousand devices, a few of
// them online and answering (every other one failing its first attempt,
// which the job retries once), and kills the server with SIGKILL at
// random moments, restarting it on the same data dir, until the job
// ends. Then every target must have exactly one command per attempt
// (counted from the command.done events, each command's end), every
// execution must have ended, and the job's counts must equal its
// executions' states. DEVMSG_CRASH_CYCLES sets the kills (default 6),
// DEVMSG_JOB_CRASH_TARGETS the devices (default 3,000).
func TestJobCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cycles := envInt(t, envCrashCycles, 6)
	targets := envInt(t, "DEVMSG_JOB_CRASH_TARGETS", 3000)
	const online = 20

	dir := t.TempDir()
	args := []string{"--mqtt.tcp_addr", "127.0.0.1:0"}
	p := startProc(t, dir, args...)
	app := p.createApp(t, "jobcrash")
	names, secrets := createDevicesIn(t, p, app, "jc-", targets)

	// Every other online device answers 1 (failed) to the first command
	// it gets, 0 to the others (its retry).
	var mu sync.Mutex
	attempts := map[int64]bool{} // cmd_ids seen
	failed := map[string]bool{}  // devices that answered 1
	connect := func(p *proc) []paho.Client {
		cs := make([]paho.Client, online)
		for i := range cs {
			prefix := "d/" + app.Key + "/" + names[i] + "/"
			var c paho.Client
			var cmu sync.Mutex
			get := func() paho.Client { cmu.Lock(); defer cmu.Unlock(); return c }
			odd := i%2 == 1
			cmu.Lock()
			c = connectCmdCrashDevice(t, p.mqtt, app.Key, names[i], secrets[i], func(m paho.Message) {
				var cmd struct {
					CmdID string `json:"cmd_id"`
				}
				if json.Unmarshal(m.Payload(), &cmd) != nil {
					return
				}
				id, _ := strconv.ParseInt(cmd.CmdID, 10, 64)
				mu.Lock()
				attempts[id] = true
				code := 0
				if odd && (!failed[names[i]] || failed[names[i]+"/"+cmd.CmdID]) {
					failed[names[i]], failed[names[i]+"/"+cmd.CmdID] = true, true
					code = 1 // the same answer when the command comes again
				}
				mu.Unlock()
				go get().Publish(prefix+"cmd/reply", 1, false, fmt.Sprintf(`{"cmd_id":%q,"code":%d}`, cmd.CmdID, code))
			})
			cmu.Unlock()
			cs[i] = c
		}
		return cs
	}
	disconnect := func(cs []paho.Client) {
		for _, c := range cs {
			c.Disconnect(0)
		}
	}

	devs := connect(p)
	// ttl 0: a device offline when its command starts ends offline at
	// once. targets×4 a minute: the job lasts about 15 s, kills included.
	st, b := p.call(t, app.Key, app.MasterSecret, "POST", "/job/v1/jobs",
		fmt.Sprintf(`{"seq_no":1,"target":{"all":true},"command":{"name":"ota","timeout":5},"ttl":0,"rollout":{"rate":%d},"retries":{"failed":1}}`, min(targets*4, 1000000)))
	var created struct {
		JobID   int64 `json:"job_id"`
		Targets int64 `json:"targets"`
	}
	if st != 200 || json.Unmarshal(b, &created) != nil || created.Targets != int64(targets) {
		t.Fatalf("create job: %d %s", st, b)
	}
	for range cycles {
		time.Sleep(time.Duration(500+rand.IntN(2000)) * time.Millisecond)
		disconnect(devs)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.cmd.Wait()
		p = startProc(t, dir, args...)
		devs = connect(p)
	}
	defer disconnect(devs)
	j := waitJob(t, p, app, created.JobID, 2*time.Minute)
	if j.State != "done" || j.Counts["pending"] != 0 {
		t.Fatalf("job after %d kills: %+v", cycles, j)
	}
	execs := jobExecutions(t, p, app, created.JobID, "")
	done := commandsDone(t, p, app, created.JobID)
	tally := map[string]int64{}
	var problems []string
	for _, e := range execs {
		tally[e.State]++
		if done[e.DeviceName] != e.Attempt {
			problems = append(problems, fmt.Sprintf("%s: attempt %d, %d commands ended", e.DeviceName, e.Attempt, done[e.DeviceName]))
		}
	}
	if len(execs) != targets {
		t.Errorf("%d executions of %d targets", len(execs), targets)
	}
	for s, n := range j.Counts {
		if n != tally[s] && !(s == "pending" && n == 0) {
			t.Errorf("counts[%s] = %d, executions in it: %d", s, n, tally[s])
		}
	}
	t.Logf("%d kills: counts %v, %d cmd_ids reached online devices", cycles, j.Counts, len(attempts))
	reportProblems(t, problems)
}
