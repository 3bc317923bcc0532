package restapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/store"
)

type jobView struct {
	JobID       int64 `json:"job_id"`
	State       string
	Targets     int64
	Counts      map[string]int64
	AbortReason string `json:"abort_reason"`
	TimeCreate  int64  `json:"time_create"`
	TimeDone    int64  `json:"time_done"`
}

type execView struct {
	DeviceName string `json:"device_name"`
	CmdID      int64  `json:"cmd_id"`
	State      string
	Code       int
	Attempt    int
	TimeDone   int64 `json:"time_done"`
}

// runJobs starts the job runner until the test ends.
func (e *env) runJobs() {
	e.t.Helper()
	if err := e.jobs.Runner().Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(e.jobs.Runner().Stop)
}

func (e *env) createJob(body string) (id, targets int64) {
	e.t.Helper()
	r := e.call("POST", "/job/v1/jobs", body)
	r.wantOK(e.t)
	var out struct {
		JobID   int64 `json:"job_id"`
		Targets int64
	}
	r.decode(e.t, &out)
	if out.JobID <= 0 {
		e.t.Fatalf("job_id in %s", r.body)
	}
	return out.JobID, out.Targets
}

func (e *env) getJob(id int64) jobView {
	e.t.Helper()
	r := e.call("GET", fmt.Sprintf("/job/v1/job?job_id=%d", id), nil)
	r.wantOK(e.t)
	var v jobView
	r.decode(e.t, &v)
	return v
}

// jobChange posts {"job_id":id} to /job/v1/job/<what>.
func (e *env) jobChange(what string, id int64) response {
	e.t.Helper()
	return e.call("POST", "/job/v1/job/"+what, fmt.Sprintf(`{"job_id":%d}`, id))
}

// waitJob polls the job until ok says it is as wanted.
func (e *env) waitJob(id int64, ok func(jobView) bool) jobView {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := e.getJob(id)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d stuck at %+v", id, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) executions(query string) ([]execView, string) {
	e.t.Helper()
	r := e.call("GET", "/job/v1/job/executions?"+query, nil)
	r.wantOK(e.t)
	var out struct {
		Executions []execView
		Next       string
	}
	r.decode(e.t, &out)
	if out.Executions == nil {
		e.t.Fatalf("executions is not a list: %s", r.body)
	}
	return out.Executions, out.Next
}

// allExecutions pages through the job's executions limit at a time.
func (e *env) allExecutions(id int64, state string, limit int) []execView {
	e.t.Helper()
	var all []execView
	cursor := ""
	for pages := 0; ; pages++ {
		page, next := e.executions(fmt.Sprintf("job_id=%d&state=%s&cursor=%s&limit=%d", id, state, cursor, limit))
		if len(page) > limit || next != "" && len(page) != limit {
			e.t.Fatalf("page of %d with next %q, limit %d", len(page), next, limit)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		if pages > 1000 {
			e.t.Fatal("no last page")
		}
		cursor = next
	}
}

func names(es []execView) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.DeviceName
	}
	return out
}

// lampFleet creates lamp-1, lamp-2 (tag lamp), lamp-off (tag lamp,
// disabled), other (tag x) and plain.
func lampFleet(e *env) {
	e.t.Helper()
	e.call("POST", "/device/v1/devices", `{"device":[
		{"name":"lamp-1","tags":["lamp"]},{"name":"lamp-2","tags":["lamp","x"]},{"name":"lamp-off","tags":["lamp"]},
		{"name":"other","tags":["x"]},{"name":"plain"}]}`).wantOK(e.t)
	c := adminCreds()
	e.do("PATCH", "/admin/v1/apps/"+e.app.Key+"/devices/lamp-off", `{"flag":1}`, &c).wantOK(e.t)
}

// TestJobTargets: a tag, all and a list each fix their targets at
// acceptance, disabled devices left out; the job waits for the runner.
func TestJobTargets(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	for _, c := range []struct {
		name, target string
		want         []string
	}{
		{"tag", `{"tag":"lamp"}`, []string{"lamp-1", "lamp-2"}},
		{"all", `{"all":true}`, []string{"lamp-1", "lamp-2", "other", "plain"}},
		{"list", `{"device_names":["plain","lamp-off","lamp-2"]}`, []string{"plain", "lamp-2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now().UnixMilli()
			id, targets := e.createJob(`{"seq_no":` + fmt.Sprint(time.Now().UnixNano()) + `,"target":` + c.target + `,"command":{"name":"ota"}}`)
			if targets != int64(len(c.want)) {
				t.Fatalf("targets %d, want %d", targets, len(c.want))
			}
			v := e.getJob(id)
			want := jobView{JobID: id, State: "running", Targets: targets, Counts: map[string]int64{"pending": targets}, TimeCreate: v.TimeCreate}
			if v.TimeCreate < before || !maps.Equal(v.Counts, want.Counts) || v.State != want.State || v.Targets != targets || v.TimeDone != 0 {
				t.Fatalf("job %+v, want %+v", v, want)
			}
			execs := e.allExecutions(id, "", 100)
			if got := names(execs); !slices.Equal(got, c.want) {
				t.Fatalf("executions %v, want %v", got, c.want)
			}
			for _, x := range execs {
				if x.State != "pending" || x.CmdID != 0 || x.Attempt != 0 {
					t.Fatalf("a target not reached: %+v", x)
				}
			}
		})
	}
	t.Run("no targets", func(t *testing.T) {
		id, targets := e.createJob(`{"seq_no":90,"target":{"tag":"none"},"command":{"name":"ota"}}`)
		if targets != 0 {
			t.Fatalf("job of no targets has %d", targets)
		}
		e.runJobs() // it ends at the runner's next look, with its job.done
		if v := e.waitJob(id, func(v jobView) bool { return v.State != "running" }); v.State != "done" || v.TimeDone == 0 || v.Counts["pending"] != 0 {
			t.Fatalf("job of no targets: %+v", v)
		}
		r := e.call("GET", "/event/v1/events?types=job.done", nil)
		r.wantOK(t)
		if !strings.Contains(string(r.body), fmt.Sprintf(`"job_id":"%d"`, id)) {
			t.Fatalf("no job.done for the job of no targets: %s", r.body)
		}
	})
	t.Run("start_at ahead", func(t *testing.T) {
		at := time.Now().Add(time.Hour).Unix()
		id, _ := e.createJob(fmt.Sprintf(`{"seq_no":91,"target":{"tag":"lamp"},"command":{"name":"ota"},"start_at":%d}`, at))
		if v := e.getJob(id); v.State != "scheduled" {
			t.Fatalf("job %+v", v)
		}
	})
}

// TestJobValidation: every fault of a job request is 400 with its code
// and a message naming the field.
func TestJobValidation(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	const ok = `"target":{"tag":"lamp"},"command":{"name":"ota"}`
	for _, c := range []struct {
		name, body string
		code       int
		fragments  []string
	}{
		{"no seq_no", `{` + ok + `}`, 1002, []string{"seq_no is required"}},
		{"no target", `{"seq_no":1,"command":{"name":"ota"}}`, 1002, []string{"target is required"}},
		{"target not an object", `{"seq_no":1,"target":"lamp","command":{"name":"ota"}}`, 1003, []string{"target must be a JSON object"}},
		{"empty target", `{"seq_no":1,"target":{},"command":{"name":"ota"}}`, 1003, []string{"target must hold exactly one of tag (a string), all (true) and device_names"}},
		{"two targets", `{"seq_no":1,"target":{"tag":"lamp","all":true},"command":{"name":"ota"}}`, 1003, []string{"exactly one of"}},
		{"all false", `{"seq_no":1,"target":{"all":false},"command":{"name":"ota"}}`, 1003, []string{"target.all must be true"}},
		{"bad tag", `{"seq_no":1,"target":{"tag":"a b"},"command":{"name":"ota"}}`, 1003, []string{"target.tag"}},
		{"names not a list", `{"seq_no":1,"target":{"device_names":"lamp-1"},"command":{"name":"ota"}}`, 1003, []string{"target.device_names must be an array of device names"}},
		{"no names", `{"seq_no":1,"target":{"device_names":[]},"command":{"name":"ota"}}`, 1003, []string{"target.device_names must hold 1 to 10000 names, got 0"}},
		{"too many names", `{"seq_no":1,"target":{"device_names":[` + strings.Repeat(`"lamp-1",`, 10000) + `"lamp-2"]},"command":{"name":"ota"}}`, 1003, []string{"target.device_names must hold 1 to 10000 names, got 10001"}},
		{"unknown name", `{"seq_no":1,"target":{"device_names":["lamp-1","nobody"]},"command":{"name":"ota"}}`, 1003, []string{`target.device_names[1]: device "nobody" not found`}},
		{"repeated name", `{"seq_no":1,"target":{"device_names":["lamp-1","lamp-2","lamp-1"]},"command":{"name":"ota"}}`, 1003, []string{`target.device_names[2]: device "lamp-1" repeated`}},
		{"no command", `{"seq_no":1,"target":{"tag":"lamp"}}`, 1002, []string{"command is required"}},
		{"no command name", `{"seq_no":1,"target":{"tag":"lamp"},"command":{}}`, 1002, []string{"command.name is required"}},
		{"bad command name", `{"seq_no":1,"target":{"tag":"lamp"},"command":{"name":"o t a"}}`, 1003, []string{"command.name must be 1 to 64 characters"}},
		{"params too big", `{"seq_no":1,"target":{"tag":"lamp"},"command":{"name":"ota","params":"` + strings.Repeat("x", 256<<10) + `"}}`, 1003, []string{"command.params must be at most 262144 bytes"}},
		{"timeout 0", `{"seq_no":1,"target":{"tag":"lamp"},"command":{"name":"ota","timeout":0}}`, 1003, []string{"command.timeout must be 1 to 3600 seconds, got 0"}},
		{"timeout text", `{"seq_no":1,"target":{"tag":"lamp"},"command":{"name":"ota","timeout":"5"}}`, 1003, []string{"command.timeout must be an integer"}},
		{"ttl", `{"seq_no":1,` + ok + `,"ttl":604801}`, 1003, []string{"ttl must be 0 to 604800 seconds, got 604801"}},
		{"start_at negative", `{"seq_no":1,` + ok + `,"start_at":-1}`, 1003, []string{"start_at must be Unix seconds"}},
		{"start_at in ms", `{"seq_no":1,` + ok + fmt.Sprintf(`,"start_at":%d}`, time.Now().UnixMilli()), 1003, []string{"start_at must be Unix seconds", "366 days ahead"}},
		{"rollout not an object", `{"seq_no":1,` + ok + `,"rollout":5}`, 1003, []string{"rollout must be a JSON object"}},
		{"rate 0", `{"seq_no":1,` + ok + `,"rollout":{"rate":0}}`, 1003, []string{"rollout.rate must be 1 to 1000000 commands a minute, got 0"}},
		{"rate too high", `{"seq_no":1,` + ok + `,"rollout":{"rate":1000001}}`, 1003, []string{"rollout.rate must be 1 to 1000000"}},
		{"rate 1.5", `{"seq_no":1,` + ok + `,"rollout":{"rate":1.5}}`, 1003, []string{"rollout.rate must be an integer"}},
		{"ramp without start", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"factor":2,"every":10}}}`, 1002, []string{"rollout.ramp.start is required"}},
		{"ramp without factor", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"every":10}}}`, 1002, []string{"rollout.ramp.factor is required"}},
		{"ramp without every", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"factor":2}}}`, 1002, []string{"rollout.ramp.every is required"}},
		{"ramp start over rate", `{"seq_no":1,` + ok + `,"rollout":{"rate":100,"ramp":{"start":101,"factor":2,"every":10}}}`, 1003, []string{"rollout.ramp.start must be 1 to rollout.rate (100) commands a minute, got 101"}},
		{"ramp start over default rate", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":1001,"factor":2,"every":10}}}`, 1003, []string{"rollout.ramp.start must be 1 to rollout.rate (1000)"}},
		{"factor low", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"factor":1.05,"every":10}}}`, 1003, []string{"rollout.ramp.factor must be 1.1 to 5, got 1.05"}},
		{"factor high", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"factor":5.5,"every":10}}}`, 1003, []string{"rollout.ramp.factor must be 1.1 to 5"}},
		{"factor text", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"factor":"2","every":10}}}`, 1003, []string{"rollout.ramp.factor must be a number"}},
		{"every 0", `{"seq_no":1,` + ok + `,"rollout":{"ramp":{"start":10,"factor":2,"every":0}}}`, 1003, []string{"rollout.ramp.every must be at least 1"}},
		{"abort not a list", `{"seq_no":1,` + ok + `,"abort":{"states":["failed"],"percent":5}}`, 1003, []string{"abort must be an array of rules"}},
		{"abort too many", `{"seq_no":1,` + ok + `,"abort":[` + strings.Repeat(`{"states":["failed"],"percent":5},`, 10) + `{"states":["failed"],"percent":5}]}`, 1003, []string{"abort holds at most 10 rules, got 11"}},
		{"abort without states", `{"seq_no":1,` + ok + `,"abort":[{"percent":5}]}`, 1002, []string{"abort[0].states is required"}},
		{"abort no states", `{"seq_no":1,` + ok + `,"abort":[{"states":[],"percent":5}]}`, 1003, []string{"abort[0].states must name at least one state"}},
		{"abort open state", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"],"percent":5},{"states":["queued"],"percent":5}]}`, 1003, []string{`abort[1].states: "queued" is not a state an execution ends in`}},
		{"abort without percent", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"]}]}`, 1002, []string{"abort[0].percent is required"}},
		{"abort percent high", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"],"percent":100.01}]}`, 1003, []string{"abort[0].percent must be 0 to 100 with at most two decimals, got 100.01"}},
		{"abort three decimals", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"],"percent":12.345}]}`, 1003, []string{"abort[0].percent must be 0 to 100 with at most two decimals"}},
		{"abort min_done", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"],"percent":5,"min_done":-1}]}`, 1003, []string{"abort[0].min_done must be 0 or more, got -1"}},
		{"abort unknown field", `{"seq_no":1,` + ok + `,"abort":[{"states":["failed"],"percent":5,"min":3}]}`, 1003, []string{`unknown field "abort[0].min"`}},
		{"retries high", `{"seq_no":1,` + ok + `,"retries":{"failed":11}}`, 1003, []string{"retries.failed must be 0 to 10, got 11"}},
		{"retries negative", `{"seq_no":1,` + ok + `,"retries":{"timed_out":-1}}`, 1003, []string{"retries.timed_out must be 0 to 10, got -1"}},
		{"retries of another state", `{"seq_no":1,` + ok + `,"retries":{"offline":1}}`, 1003, []string{`unknown field "retries.offline"`, "failed, timed_out"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call("POST", "/job/v1/jobs", c.body).wantError(t, 400, c.code, c.fragments...)
		})
	}
	t.Run("messages name the field once", func(t *testing.T) {
		r := e.call("POST", "/job/v1/jobs", `{"seq_no":1,`+ok+`,"rollout":{"rate":0}}`)
		if want := `{"error":{"code":1003,"message":"rollout.rate must be 1 to 1000000 commands a minute, got 0"}}`; string(r.body) != want {
			t.Fatalf("body %s, want %s", r.body, want)
		}
	})
	t.Run("nothing was created", func(t *testing.T) {
		active, err := e.st.ActiveJobs(context.Background())
		if err != nil || len(active) != 0 {
			t.Fatalf("active jobs %v, %v", active, err)
		}
	})
	t.Run("the edges are taken", func(t *testing.T) {
		_, n := e.createJob(`{"seq_no":2,"target":{"device_names":["lamp-1"]},"command":{"name":"a.b-c_d:1","params":[1,{"x":null}],"timeout":3600},` +
			`"ttl":604800,"start_at":0,"rollout":{"rate":1000000,"ramp":{"start":1,"factor":5,"every":1}},` +
			`"abort":[{"states":["failed","timed_out","expired","offline","rejected","cancelled","succeeded"],"percent":0.29,"min_done":0},{"states":["failed"],"percent":100}],` +
			`"retries":{"failed":10,"timed_out":0}}`)
		if n != 1 {
			t.Fatalf("targets %d", n)
		}
		e.createJob(`{"seq_no":3,` + ok + `,"rollout":{"rate":1,"ramp":{"start":1,"factor":1.1,"every":1}},"abort":[{"states":["failed"],"percent":0}]}`)
	})
}

// TestJobSeqNo: a repeat with the same body answers the same job and
// makes none; another body with the seq_no is refused.
func TestJobSeqNo(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	const body = `{"seq_no":7,"target":{"tag":"lamp"},"command":{"name":"ota","params":{"version":"2.1"}},"rollout":{"rate":60}}`
	id, targets := e.createJob(body)
	r := e.call("POST", "/job/v1/jobs", body)
	r.wantOK(t)
	if r.header.Get("X-Devmsg-Replayed") != "true" || string(r.body) != fmt.Sprintf(`{"job_id":%d,"targets":%d}`, id, targets) {
		t.Fatalf("replay %s %v", r.body, r.header)
	}
	// The same meaning spelt otherwise is the same request.
	r = e.call("POST", "/job/v1/jobs", `{ "rollout":{"rate":60.0}, "command":{"params":{"version":"2.1"},"name":"ota"}, "target":{"tag":"lamp"}, "seq_no":7 }`)
	r.wantOK(t)
	if r.header.Get("X-Devmsg-Replayed") != "true" {
		t.Fatalf("respelt repeat %s", r.body)
	}
	e.call("POST", "/job/v1/jobs", strings.Replace(body, "2.1", "2.2", 1)).wantError(t, 400, 1003, "seq_no 7 already used")
	active, err := e.st.ActiveJobs(context.Background())
	if err != nil || len(active) != 1 || active[0].ID != id {
		t.Fatalf("active jobs %+v, %v", active, err)
	}
}

// TestJobActiveLimit: an app has at most 10 jobs scheduled, running or
// paused; the 11th is 429/2002 until one ends. A repeat of an accepted
// job is still answered.
func TestJobActiveLimit(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	var ids []int64
	for i := range 10 {
		id, _ := e.createJob(fmt.Sprintf(`{"seq_no":%d,"target":{"tag":"lamp"},"command":{"name":"ota"}}`, 100+i))
		ids = append(ids, id)
	}
	r := e.call("POST", "/job/v1/jobs", `{"seq_no":200,"target":{"tag":"lamp"},"command":{"name":"ota"}}`)
	r.wantError(t, 429, 2002, "10 jobs scheduled, running or paused", "cancel one")
	if ra := r.header.Get("Retry-After"); ra != "60" {
		t.Fatalf("Retry-After %q", ra)
	}
	r = e.call("POST", "/job/v1/jobs", `{"seq_no":100,"target":{"tag":"lamp"},"command":{"name":"ota"}}`)
	r.wantOK(t)
	if string(r.body) != fmt.Sprintf(`{"job_id":%d,"targets":2}`, ids[0]) {
		t.Fatalf("repeat %s", r.body)
	}
	// Another app has its own 10.
	other := e.createApp("other")
	oc := credsOf(other)
	e.do("POST", "/job/v1/jobs", `{"seq_no":1,"target":{"all":true},"command":{"name":"ota"}}`, &oc).wantOK(t)

	// GET /job/v1/jobs lists the ten, oldest first, and only this app's.
	r = e.call("GET", "/job/v1/jobs", nil)
	r.wantOK(t)
	var list apitypes.JobList
	r.decode(t, &list)
	if len(list.Jobs) != 10 {
		t.Fatalf("GET /job/v1/jobs listed %d jobs, want 10: %s", len(list.Jobs), r.body)
	}
	for i, j := range list.Jobs {
		if j.JobID != ids[i] || j.State != "running" {
			t.Fatalf("job %d listed %+v, want %d running", i, j, ids[i])
		}
	}

	e.jobChange("cancel", ids[3]).wantOK(t)
	r = e.call("GET", "/job/v1/jobs", nil)
	r.decode(t, &list)
	if len(list.Jobs) != 9 || slices.ContainsFunc(list.Jobs, func(j apitypes.Job) bool { return j.JobID == ids[3] }) {
		t.Fatalf("after a cancel GET /job/v1/jobs lists %s", r.body)
	}
	e.createJob(`{"seq_no":202,"target":{"tag":"lamp"},"command":{"name":"ota"}}`)
	e.call("POST", "/job/v1/jobs", `{"seq_no":203,"target":{"tag":"lamp"},"command":{"name":"ota"}}`).wantError(t, 429, 2002)
}

// TestJobRateLimit: creating a job takes one command token.
func TestJobRateLimit(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	c := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"command":1}`, &c).wantOK(t)
	e.createJob(`{"seq_no":1,"target":{"tag":"lamp"},"command":{"name":"ota"}}`)
	r := e.call("POST", "/job/v1/jobs", `{"seq_no":2,"target":{"tag":"lamp"},"command":{"name":"ota"}}`)
	r.wantError(t, 429, 2002, "command requests per second")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

// fleet creates n devices named prefix-000..., all tagged tag.
func fleet(e *env, prefix, tag string, n int) []string {
	e.t.Helper()
	var devs, out []string
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		out = append(out, name)
		devs = append(devs, fmt.Sprintf(`{"name":%q,"tags":[%q]}`, name, tag))
	}
	e.call("POST", "/device/v1/devices", `{"device":[`+strings.Join(devs, ",")+`]}`).wantOK(e.t)
	return out
}

// jobDone is the data of a job.done event.
type jobDone struct {
	JobID       string           `json:"job_id"`
	State       string           `json:"state"`
	Counts      map[string]int64 `json:"counts"`
	AbortReason string           `json:"abort_reason"`
}

// jobDoneEvents pulls the app's job.done events.
func (e *env) jobDoneEvents() []jobDone {
	e.t.Helper()
	r := e.call("GET", "/event/v1/events?types=job.done", nil)
	r.wantOK(e.t)
	var page struct {
		Events []struct {
			Type string
			Data jobDone
		}
	}
	r.decode(e.t, &page)
	out := make([]jobDone, len(page.Events))
	for i, ev := range page.Events {
		out[i] = ev.Data
	}
	return out
}

// TestJobRunsToDone: the runner gives every target its command (no
// device is online and ttl is 0, so each ends offline), the job ends
// done with job.done in the event log, and its executions page by
// cursor, filtered by state.
func TestJobRunsToDone(t *testing.T) {
	e := newEnv(t)
	devs := fleet(e, "dev", "fleet", 7)
	e.runJobs()
	id, targets := e.createJob(`{"seq_no":1,"target":{"tag":"fleet"},"command":{"name":"ping"}}`)
	if targets != 7 {
		t.Fatalf("targets %d", targets)
	}
	v := e.waitJob(id, func(v jobView) bool { return v.State == "done" })
	if want := map[string]int64{"offline": 7, "pending": 0}; !maps.Equal(v.Counts, want) || v.TimeDone < v.TimeCreate || v.AbortReason != "" {
		t.Fatalf("done job %+v", v)
	}
	for _, limit := range []int{1, 3, 7, 1000} {
		execs := e.allExecutions(id, "", limit)
		if !slices.Equal(names(execs), devs) {
			t.Fatalf("limit %d: executions %v", limit, names(execs))
		}
		for _, x := range execs {
			if x.State != "offline" || x.CmdID == 0 || x.Attempt != 1 || x.TimeDone == 0 {
				t.Fatalf("execution %+v", x)
			}
		}
	}
	if got := e.allExecutions(id, "offline", 2); len(got) != 7 {
		t.Fatalf("offline: %d", len(got))
	}
	for _, st := range []string{"pending", "succeeded", "queued"} {
		if got, next := e.executions(fmt.Sprintf("job_id=%d&state=%s", id, st)); len(got) != 0 || next != "" {
			t.Fatalf("%s: %v %q", st, got, next)
		}
	}
	// An execution's cmd_id is an ordinary command.
	execs, _ := e.executions(fmt.Sprintf("job_id=%d&limit=1", id))
	var cmd commandView
	r := e.call("GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", execs[0].CmdID), nil)
	r.wantOK(t)
	r.decode(t, &cmd)
	if cmd.DeviceName != devs[0] || cmd.State != "offline" {
		t.Fatalf("command %+v", cmd)
	}
	evs := e.jobDoneEvents()
	if len(evs) != 1 || evs[0].JobID != fmt.Sprint(id) || evs[0].State != "done" || evs[0].Counts["offline"] != 7 {
		t.Fatalf("job.done events %+v", evs)
	}
	t.Run("bad parameters", func(t *testing.T) {
		q := fmt.Sprintf("/job/v1/job/executions?job_id=%d", id)
		e.call("GET", "/job/v1/job/executions", nil).wantError(t, 400, 1002, "job_id is required")
		e.call("GET", q+"&state=running", nil).wantError(t, 400, 1003, `state must be one of pending, queued`, `got "running"`)
		e.call("GET", q+"&cursor=x", nil).wantError(t, 400, 1003, `cursor must be the next of an earlier page, got "x"`)
		e.call("GET", q+"&cursor=-1", nil).wantError(t, 400, 1003, "cursor")
		e.call("GET", q+"&limit=0", nil).wantError(t, 400, 1003, `limit must be an integer from 1 to 1000, got "0"`)
		e.call("GET", q+"&limit=1001", nil).wantError(t, 400, 1003, "limit")
		e.call("GET", q+"&limit=x", nil).wantError(t, 400, 1003, "limit")
		if got, next := e.executions(fmt.Sprintf("job_id=%d&cursor=100", id)); len(got) != 0 || next != "" {
			t.Fatalf("past the end: %v %q", got, next)
		}
	})
}

// TestJobExecutionsMixed: a paused job's executions list those with a
// command, then the targets not reached as pending, in target order.
func TestJobExecutionsMixed(t *testing.T) {
	e := newEnv(t)
	devs := fleet(e, "dev", "fleet", 6)
	e.runJobs()
	// A command a minute: the first goes at once, the next a minute on.
	id, _ := e.createJob(`{"seq_no":1,"target":{"tag":"fleet"},"command":{"name":"ping"},"ttl":60,"rollout":{"rate":1}}`)
	e.waitJob(id, func(v jobView) bool { return v.Counts["queued"] == 1 })
	e.jobChange("pause", id).wantOK(t)
	all := e.allExecutions(id, "", 2)
	if !slices.Equal(names(all), devs) || all[0].State != "queued" || all[0].CmdID == 0 || all[1].State != "pending" || all[5].State != "pending" {
		t.Fatalf("executions %+v", all)
	}
	if p := e.allExecutions(id, "pending", 2); !slices.Equal(names(p), devs[1:]) {
		t.Fatalf("pending %v", names(p))
	}
	if q := e.allExecutions(id, "queued", 2); len(q) != 1 || q[0].DeviceName != devs[0] {
		t.Fatalf("queued %+v", q)
	}
}

// TestJobAbort: once min_done executions ended, a share of them in the
// rule's states above its percent aborts the job; targets not reached
// stay pending.
func TestJobAbort(t *testing.T) {
	e := newEnv(t)
	fleet(e, "dev", "fleet", 10)
	e.runJobs()
	// A command a second, each ending offline at once: after the second
	// the share is 100%.
	id, _ := e.createJob(`{"seq_no":1,"target":{"tag":"fleet"},"command":{"name":"ota"},"rollout":{"rate":60},` +
		`"abort":[{"states":["failed","timed_out"],"percent":10,"min_done":1},{"states":["offline"],"percent":50,"min_done":2}]}`)
	v := e.waitJob(id, func(v jobView) bool { return v.State == "aborted" })
	if v.Counts["offline"] < 2 || v.Counts["pending"] == 0 || v.Counts["offline"]+v.Counts["pending"] != 10 || v.TimeDone == 0 {
		t.Fatalf("aborted job %+v", v)
	}
	if !strings.HasPrefix(v.AbortReason, "offline: ") || !strings.Contains(v.AbortReason, "more than 50%") {
		t.Fatalf("abort_reason %q", v.AbortReason)
	}
	time.Sleep(300 * time.Millisecond) // a few polls: no command more
	if v2 := e.getJob(id); !maps.Equal(v2.Counts, v.Counts) {
		t.Fatalf("an aborted job moved: %+v then %+v", v.Counts, v2.Counts)
	}
	evs := e.jobDoneEvents()
	if len(evs) != 1 || evs[0].State != "aborted" || evs[0].AbortReason != v.AbortReason {
		t.Fatalf("job.done %+v", evs)
	}
	e.jobChange("resume", id).wantError(t, 400, 1003, fmt.Sprintf("job %d is aborted: only a paused job can be resumed", id))
}

// TestJobPauseResumeCancel: each answers the job as it stands after,
// a change that does not apply is 400/1003, and a cancel cancels the
// commands not yet sent.
func TestJobPauseResumeCancel(t *testing.T) {
	e := newEnv(t)
	fleet(e, "dev", "fleet", 3)
	var v jobView
	id, _ := e.createJob(`{"seq_no":1,"target":{"tag":"fleet"},"command":{"name":"ota"},"ttl":600}`)

	r := e.jobChange("pause", id)
	r.wantOK(t)
	r.decode(t, &v)
	if v.JobID != id || v.State != "paused" || v.Counts["pending"] != 3 {
		t.Fatalf("paused %+v", v)
	}
	e.jobChange("pause", id).wantError(t, 400, 1003, fmt.Sprintf("job %d is paused: only a scheduled or running job can be paused", id))
	r = e.jobChange("resume", id)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "running" {
		t.Fatalf("resumed %+v", v)
	}
	e.jobChange("resume", id).wantError(t, 400, 1003, fmt.Sprintf("job %d is running: only a paused job can be resumed", id))

	e.runJobs()
	e.waitJob(id, func(v jobView) bool { return v.Counts["queued"] == 3 })
	r = e.jobChange("cancel", id)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "cancelled" || v.TimeDone == 0 {
		t.Fatalf("cancelled %+v", v)
	}
	v = e.waitJob(id, func(v jobView) bool { return v.Counts["cancelled"] == 3 })
	if v.State != "cancelled" {
		t.Fatalf("after the sweep %+v", v)
	}
	for _, x := range e.allExecutions(id, "", 10) {
		if x.State != "cancelled" {
			t.Fatalf("execution %+v", x)
		}
	}
	// Cancelling an ended job answers it as it is.
	r = e.jobChange("cancel", id)
	r.wantOK(t)
	var again jobView
	r.decode(t, &again)
	if again.State != "cancelled" || again.TimeDone != v.TimeDone {
		t.Fatalf("cancel again %+v", again)
	}
	e.jobChange("pause", id).wantError(t, 400, 1003, fmt.Sprintf("job %d is cancelled", id))
	e.jobChange("resume", id).wantError(t, 400, 1003, fmt.Sprintf("job %d is cancelled", id))

	t.Run("scheduled", func(t *testing.T) {
		id, _ := e.createJob(fmt.Sprintf(`{"seq_no":2,"target":{"tag":"fleet"},"command":{"name":"ota"},"start_at":%d}`, time.Now().Add(time.Hour).Unix()))
		r := e.jobChange("pause", id)
		r.wantOK(t)
		r.decode(t, &v)
		if v.State != "paused" {
			t.Fatalf("paused %+v", v)
		}
		r = e.jobChange("resume", id)
		r.wantOK(t)
		r.decode(t, &v)
		if v.State != "scheduled" {
			t.Fatalf("resumed before start_at: %+v", v)
		}
		time.Sleep(300 * time.Millisecond)
		if v := e.getJob(id); v.State != "scheduled" || v.Counts["pending"] != 3 {
			t.Fatalf("a scheduled job started early: %+v", v)
		}
	})
	t.Run("bad bodies", func(t *testing.T) {
		for _, what := range []string{"pause", "resume", "cancel"} {
			e.call("POST", "/job/v1/job/"+what, `{}`).wantError(t, 400, 1002, "job_id is required")
			e.call("POST", "/job/v1/job/"+what, `{"job_id":"1"}`).wantError(t, 400, 1003, "job_id must be an integer")
			e.call("POST", "/job/v1/job/"+what, `{"job_id":1,"force":true}`).wantError(t, 400, 1003, `unknown field "force"`)
		}
	})
}

// TestJobNotFound: an unknown job, or another app's, is 400/1003 as an
// unknown cmd_id is, on every job endpoint.
func TestJobNotFound(t *testing.T) {
	e := newEnv(t)
	fleet(e, "dev", "fleet", 1)
	id, _ := e.createJob(`{"seq_no":1,"target":{"all":true},"command":{"name":"ota"}}`)
	other := e.createApp("other")
	oc := credsOf(other)
	for _, c := range []struct {
		id    int64
		creds creds
	}{{12345, e.appCreds()}, {id, oc}} {
		want := fmt.Sprintf("job %d not found", c.id)
		e.do("GET", fmt.Sprintf("/job/v1/job?job_id=%d", c.id), nil, &c.creds).wantError(t, 400, 1003, want)
		e.do("GET", fmt.Sprintf("/job/v1/job/executions?job_id=%d", c.id), nil, &c.creds).wantError(t, 400, 1003, want)
		for _, what := range []string{"pause", "resume", "cancel"} {
			e.do("POST", "/job/v1/job/"+what, fmt.Sprintf(`{"job_id":%d}`, c.id), &c.creds).wantError(t, 400, 1003, want)
		}
	}
	e.call("GET", "/job/v1/job", nil).wantError(t, 400, 1002, "job_id is required")
	e.call("GET", "/job/v1/job?job_id=x", nil).wantError(t, 400, 1003, "job_id must be a positive integer")
	if v := e.getJob(id); v.State != "running" {
		t.Fatalf("the other app changed the job: %+v", v)
	}
}

// TestJobAPITypes: the job requests of package apitypes are read field
// by field, and each answer decodes as its apitypes type, which writes
// it back byte for byte.
func TestJobAPITypes(t *testing.T) {
	e := newEnv(t)
	lampFleet(e)
	rate, timeout, ttl, at := int64(120), int64(90), int64(3600), time.Now().Add(time.Hour).Unix()
	req := apitypes.JobRequest{
		SeqNo:   1,
		Target:  apitypes.JobTarget{DeviceNames: []string{"lamp-1", "lamp-2", "lamp-off"}},
		Command: apitypes.JobCommand{Name: "ota", Params: json.RawMessage(`{"version":"2.1"}`), Timeout: &timeout},
		TTL:     &ttl, StartAt: &at,
		Rollout: &apitypes.JobRollout{Rate: &rate, Ramp: &apitypes.JobRamp{Start: 10, Factor: 1.5, Every: 5}},
		Abort:   []apitypes.JobAbort{{States: []string{"failed"}, Percent: 12.5, MinDone: 8}},
		Retries: &apitypes.JobRetries{Failed: 2, TimedOut: 1},
	}
	r := e.call("POST", "/job/v1/jobs", req)
	var created apitypes.JobCreated
	answer(t, "create", r, &created)
	if created.Targets != 2 {
		t.Fatalf("created %+v", created)
	}
	j, err := e.st.GetJob(context.Background(), e.app.Key, created.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != "scheduled" || j.StartAt != at || j.TTL != ttl || j.Rate != rate || j.Command.Timeout != timeout ||
		string(j.Command.Params) != `{"version":"2.1"}` || *j.Ramp != (store.JobRamp{Start: 10, Factor: 1.5, Every: 5}) ||
		len(j.Abort) != 1 || j.Abort[0].Percent != 12.5 || j.Abort[0].MinDone != 8 || j.Retries["failed"] != 2 || j.Retries["timed_out"] != 1 {
		t.Fatalf("stored %+v", j)
	}
	var v apitypes.Job
	answer(t, "get", e.call("GET", fmt.Sprintf("/job/v1/job?job_id=%d", created.JobID), nil), &v)
	var ex apitypes.JobExecutions
	answer(t, "executions", e.call("GET", fmt.Sprintf("/job/v1/job/executions?job_id=%d&limit=1", created.JobID), nil), &ex)
	if len(ex.Executions) != 1 || ex.Next != "1" {
		t.Fatalf("executions %+v", ex)
	}
	answer(t, "pause", e.call("POST", "/job/v1/job/pause", apitypes.JobRef{JobID: created.JobID}), &v)
	if v.State != "paused" {
		t.Fatalf("paused %+v", v)
	}
}

// TestJobAcrossRestart: a job accepted (200) and midway is there after
// the server restarts on the same data, with the commands it had
// started, and the runner carries it on to done without starting a
// second command for a target.
func TestJobAcrossRestart(t *testing.T) {
	e := newEnv(t)
	devs := fleet(e, "dev", "fleet", 5)
	e.runJobs()
	// A command a second, each ending offline at once.
	id, _ := e.createJob(`{"seq_no":1,"target":{"tag":"fleet"},"command":{"name":"ping"},"rollout":{"rate":60}}`)
	before := e.waitJob(id, func(v jobView) bool { return v.Counts["offline"] >= 2 })
	e.restart()
	after := e.getJob(id)
	if after.State != "running" || after.Targets != 5 || after.Counts["offline"] < before.Counts["offline"] {
		t.Fatalf("after the restart %+v, before %+v", after, before)
	}
	started := e.allExecutions(id, "offline", 10)
	e.runJobs()
	done := e.waitJob(id, func(v jobView) bool { return v.State == "done" })
	if want := map[string]int64{"offline": 5, "pending": 0}; !maps.Equal(done.Counts, want) {
		t.Fatalf("done %+v", done)
	}
	execs := e.allExecutions(id, "", 10)
	if !slices.Equal(names(execs), devs) {
		t.Fatalf("executions %v", names(execs))
	}
	for i, x := range execs {
		if x.Attempt != 1 {
			t.Fatalf("execution %+v", x)
		}
		if i < len(started) && x.CmdID != started[i].CmdID {
			t.Fatalf("%s has command %d, had %d before the restart", x.DeviceName, x.CmdID, started[i].CmdID)
		}
	}
	// Each command ends with one command.done: one each is one command each.
	for _, d := range devs {
		r := e.call("GET", "/event/v1/events?types=command.done&device_name="+d, nil)
		r.wantOK(t)
		if n := strings.Count(string(r.body), `"type":"command.done"`); n != 1 {
			t.Fatalf("%s had %d commands: %s", d, n, r.body)
		}
	}
}
