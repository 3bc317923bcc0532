package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// newJobsEnv is newEnv with the jobs' runner started, so jobs start
// their commands.
func newJobsEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	r := e.jobs.Runner()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return e
}

// createTagged registers devices carrying tag.
func (e *env) createTagged(a app, tag string, names ...string) {
	e.t.Helper()
	devs := make([]map[string]any, len(names))
	for i, n := range names {
		devs[i] = map[string]any{"name": n, "tags": []string{tag}}
	}
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/devices", map[string]any{"device": devs}, nil)
}

// jobForm is a valid create form: the tag's devices, one command a
// minute so the job stays running while the test looks at it.
func jobForm(tag string) url.Values {
	return url.Values{"target": {"tag"}, "tag": {tag}, "name": {"reboot"}, "params": {`{"delay_s":5}`},
		"timeout": {"30"}, "ttl": {"60"}, "rate": {"1"}}
}

var jobURLRE = regexp.MustCompile(`/jobs/(\d+)$`)

func TestJobsPageCreateAndControl(t *testing.T) {
	e := newJobsEnv(t)
	a := e.createApp("fleet")
	e.createTagged(a, "lamp", "lamp-a", "lamp-b")
	e.createTagged(a, "fan", "fan-a")
	b := e.browser()
	b.loginApp(a)
	jobs := "/console/apps/" + a.Key + "/jobs"
	b.get(jobs).want(t, 200, `id="nav-jobs" href="`+jobs+`" aria-current="page"`, `id="job-create"`, `id="jobs-empty"`, `id="job-lookup"`)

	p := b.post(jobs, jobForm("lamp"))
	m := jobURLRE.FindStringSubmatch(p.url)
	if m == nil {
		t.Fatalf("after create at %s:\n%s", p.url, p.body)
	}
	id := m[1]
	p.want(t, 200, "accepted for 2 devices", `id="job-progress"`, `data-live="2"`, `id="job-pause"`, `id="job-cancel"`)
	if s := p.text("job-state"); s != "running" {
		t.Errorf("state %q after create", s)
	}
	if s := p.text("job-targets"); s != "2" {
		t.Errorf("targets %q", s)
	}
	for _, d := range []string{"lamp-a", "lamp-b"} {
		if !p.has(`<tr data-device="` + d + `">`) {
			t.Errorf("the executions table lacks %s:\n%s", d, p.text("job-execs"))
		}
	}
	if p.has(`data-device="fan-a"`) {
		t.Error("a device without the tag is a target")
	}
	// Every POST form carries the CSRF token; a POST without it does
	// nothing.
	for _, pg := range []page{p, b.get(jobs), b.get(jobs + "/" + id)} {
		forms, tokens := strings.Count(pg.body, `method="post"`), strings.Count(pg.body, `name="csrf" value="`+b.csrf+`"`)
		if forms < 2 || forms != tokens {
			t.Errorf("%s: %d POST forms, %d CSRF inputs", pg.url, forms, tokens)
		}
	}
	b.post(jobs+"/"+id+"/cancel", url.Values{"csrf": {"forged"}}).want(t, http.StatusForbidden, "CSRF check failed")
	p = b.get(jobs + "/" + id)
	// The counts add up to the targets, and the bar draws them.
	if !p.has(`class="job-bar"`) || !p.has(`id="job-count-pending"`) {
		t.Errorf("no bar or pending count:\n%s", p.text("job-progress"))
	}
	sum := 0
	for _, m := range regexp.MustCompile(`id="job-count-[a-z_]+">(\d+)<`).FindAllStringSubmatch(p.body, -1) {
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	if sum != 2 {
		t.Errorf("the counts add up to %d, not the 2 targets", sum)
	}

	p = b.post(jobs+"/"+id+"/pause", nil)
	p.want(t, 200, "Job "+id+" paused", `id="job-resume"`)
	if s := p.text("job-state"); s != "paused" {
		t.Errorf("state %q after pause", s)
	}
	p = b.post(jobs+"/"+id+"/resume", nil)
	p.want(t, 200, "Job "+id+" resumed", `id="job-pause"`)
	if s := p.text("job-state"); s != "running" {
		t.Errorf("state %q after resume", s)
	}
	p = b.post(jobs+"/"+id+"/cancel", nil)
	p.want(t, 200, "Job "+id+" cancelled")
	if s := p.text("job-state"); s != "cancelled" {
		t.Errorf("state %q after cancel", s)
	}
	if p.has(`id="job-pause"`) || p.has(`id="job-cancel"`) || p.has(`id="job-resume"`) {
		t.Error("an ended job still offers pause, resume or cancel")
	}
	if p.text("job-time-done") == "—" {
		t.Error("a cancelled job shows no end time")
	}
	// Pausing an ended job is the API's refusal, shown as it words it.
	p = b.post(jobs+"/"+id+"/pause", nil)
	p.want(t, 200, `id="flash"`)
	if s := p.text("flash-message"); !strings.Contains(s, "only a scheduled or running job can be paused") {
		t.Errorf("flash after pausing a cancelled job: %q", s)
	}

	// The list shows the session's job with its state.
	p = b.get(jobs)
	p.want(t, 200, `<tr data-job-id="`+id+`">`)
	if p.has(`id="jobs-empty"`) {
		t.Error("the list is empty after a create")
	}
	if !strings.Contains(p.text("jobs-table"), "cancelled") {
		t.Errorf("the list does not show the state:\n%s", p.text("jobs-table"))
	}
}

func TestJobsPageFormErrors(t *testing.T) {
	e := newJobsEnv(t)
	a := e.createApp("fleet")
	e.createTagged(a, "lamp", "lamp-a")
	b := e.browser()
	b.loginAdmin()
	jobs := "/console/apps/" + a.Key + "/jobs"
	b.get(jobs)
	for _, tc := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{"the API's range", map[string]string{"rate": "0"}, "rollout.rate must be 1 to 1000000"},
		{"the API's abort rule", map[string]string{"abort_percent": "150"}, "abort[0].states must name at least one state"},
		{"the API's ramp", map[string]string{"ramp_start": "1", "ramp_every": "5"}, "rollout.ramp.factor must be 1.1 to 5"},
		{"an abort rule without its percent", map[string]string{"abort_min_done": "5"}, "Enter the abort rule's percent"},
		{"not a number", map[string]string{"timeout": "soon"}, `timeout must be a whole number, not "soon"`},
		{"not JSON", map[string]string{"params": "{oops"}, "Params must be JSON"},
		{"no tag", map[string]string{"tag": ""}, "Name a tag, or choose every device."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := jobForm("lamp")
			for k, v := range tc.set {
				form.Set(k, v)
			}
			p := b.post(jobs, form)
			if p.url != jobs {
				t.Fatalf("an invalid form went to %s", p.url)
			}
			p.want(t, 200, `id="job-create-error"`)
			if s := p.text("job-create-error"); !strings.Contains(s, tc.want) {
				t.Errorf("error %q, want %q", s, tc.want)
			}
			if p.has(`id="flash"`) {
				t.Error("the form's error also shows at the top of the page")
			}
			// The form comes back as it was sent.
			if !p.has(`id="job-name" name="name" required spellcheck="false" placeholder="reboot" value="reboot"`) {
				t.Error("the form lost the command name")
			}
		})
	}
	// A ticked abort state is ticked again.
	form := jobForm("lamp")
	form.Set("rate", "0")
	form["abort_state"] = []string{"failed", "timed_out"}
	form.Set("abort_percent", "10")
	p := b.post(jobs, form)
	for _, s := range []string{"failed", "timed_out"} {
		if !p.has(`id="job-abort-` + s + `" name="abort_state" type="checkbox" value="` + s + `" checked`) {
			t.Errorf("abort state %s not ticked again", s)
		}
	}
	if p.has(`value="rejected" checked`) {
		t.Error("an abort state not sent is ticked")
	}
}

func TestJobsLookupAndPaging(t *testing.T) {
	e := newJobsEnv(t)
	a := e.createApp("fleet")
	names := make([]string, executionsPerPage+5)
	for i := range names {
		names[i] = fmt.Sprintf("dev-%03d", i)
	}
	e.createTagged(a, "all", names...)
	var created struct {
		JobID int64 `json:"job_id"`
	}
	e.apiCall(a.Key, a.Secret, "POST", "/job/v1/jobs", map[string]any{"seq_no": 1, "target": map[string]any{"all": true},
		"command": map[string]any{"name": "ping"}, "rollout": map[string]any{"rate": 1}}, &created)
	b := e.browser()
	b.loginAdmin()
	jobs := "/console/apps/" + a.Key + "/jobs"
	id := fmt.Sprint(created.JobID)

	// A job made elsewhere: the lookup box opens it, and then it is listed.
	p := b.get(jobs + "?job_id=" + id)
	if p.url != jobs+"/"+id {
		t.Fatalf("lookup went to %s", p.url)
	}
	if s := p.text("job-targets"); s != fmt.Sprint(len(names)) {
		t.Errorf("targets %q", s)
	}
	b.get(jobs).want(t, 200, `<tr data-job-id="`+id+`">`)
	p = b.get(jobs + "?job_id=abc")
	p.want(t, 200, `id="job-lookup-error"`, "A job id is a positive whole number")
	b.get(jobs+"/123456789").want(t, http.StatusNotFound, "job 123456789 not found")
	b.get(jobs+"/x").want(t, http.StatusNotFound, "There is no such job")

	// Executions, a page at a time, following the API's cursor.
	p = b.get(jobs + "/" + id)
	rows := strings.Count(p.body, `<tr data-device="`)
	if rows != executionsPerPage {
		t.Fatalf("first page has %d rows, want %d", rows, executionsPerPage)
	}
	next := regexp.MustCompile(`id="job-execs-next" href="([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil {
		t.Fatal("no next page link")
	}
	p = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	if rows := strings.Count(p.body, `<tr data-device="`); rows != 5 {
		t.Errorf("second page has %d rows, want 5", rows)
	}
	p.want(t, 200, `id="job-execs-first"`, `data-device="dev-054"`)
	if p.has(`id="job-execs-next"`) {
		t.Error("the last page links a next one")
	}
	// Filtered by state: a pending execution has no command yet.
	p = b.get(jobs + "/" + id + "?state=pending")
	p.want(t, 200, `<option value="pending" selected>`)
	if strings.Contains(p.text("job-execs"), "succeeded") {
		t.Error("the pending filter shows other states")
	}
	p = b.get(jobs + "/" + id + "?state=bogus")
	p.want(t, 200, `id="job-execs-error"`)
}

func TestJobsFormReachesTheJob(t *testing.T) {
	e := newJobsEnv(t)
	a := e.createApp("fleet")
	e.createTagged(a, "lamp", "lamp-a", "lamp-b")
	b := e.browser()
	b.loginAdmin()
	jobs := "/console/apps/" + a.Key + "/jobs"
	b.get(jobs)
	start := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Minute)
	form := jobForm("lamp")
	for k, v := range map[string]string{"rate": "600", "ramp_start": "10", "ramp_factor": "2.5", "ramp_every": "5",
		"abort_percent": "25.5", "abort_min_done": "4", "retry_failed": "2", "retry_timed_out": "3",
		"start_at": start.Format("2006-01-02T15:04")} {
		form.Set(k, v)
	}
	form["abort_state"] = []string{"failed", "timed_out"}
	p := b.post(jobs, form)
	m := jobURLRE.FindStringSubmatch(p.url)
	if m == nil {
		t.Fatalf("after create at %s:\n%s", p.url, p.text("job-create-error"))
	}
	if s := p.text("job-state"); s != "scheduled" {
		t.Errorf("a job starting in two days is %q", s)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	j, err := e.st.GetJob(context.Background(), a.Key, id)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Job{Tag: "lamp", Command: store.JobCommand{Name: "reboot", Params: json.RawMessage(`{"delay_s":5}`), Timeout: 30},
		TTL: 60, StartAt: start.Unix(), Rate: 600, Ramp: &store.JobRamp{Start: 10, Factor: 2.5, Every: 5},
		Abort:   []store.JobAbort{{States: []string{"failed", "timed_out"}, Percent: 25.5, MinDone: 4}},
		Retries: map[string]int{"failed": 2, "timed_out": 3}}
	got := store.Job{Tag: j.Tag, Command: j.Command, TTL: j.TTL, StartAt: j.StartAt, Rate: j.Rate, Ramp: j.Ramp, Abort: j.Abort, Retries: j.Retries}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stored job\n%+v\nwant\n%+v", got, want)
	}
	// Paused and resumed before its start time, it is scheduled again.
	b.post(jobs+"/"+m[1]+"/pause", nil).want(t, 200, "Job "+m[1]+" paused.")
	b.post(jobs+"/"+m[1]+"/resume", nil).want(t, 200, "Job "+m[1]+" is scheduled.")

	// Every device: no tag.
	form = jobForm("")
	form.Set("target", "all")
	p = b.post(jobs, form)
	p.want(t, 200, "accepted for 2 devices")
}

// TestJobsPageListsJobsMadeElsewhere: a job created through the API,
// not the console, is on the jobs page while it is active.
func TestJobsPageListsJobsMadeElsewhere(t *testing.T) {
	e := newEnv(t) // no runner: the job stays running
	a := e.createApp("fleet")
	e.createTagged(a, "lamp", "lamp-a")
	var created struct {
		JobID int64 `json:"job_id"`
	}
	e.apiCall(a.Key, a.Secret, "POST", "/job/v1/jobs", map[string]any{"seq_no": 1, "target": map[string]any{"tag": "lamp"},
		"command": map[string]any{"name": "reboot"}}, &created)
	if created.JobID == 0 {
		t.Fatal("no job_id")
	}
	b := e.browser()
	b.loginApp(a)
	b.get("/console/apps/"+a.Key+"/jobs").want(t, 200, fmt.Sprintf(`/jobs/%d"`, created.JobID))
}
