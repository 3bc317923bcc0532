package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devmsg/devmsg/apitypes"
)

// The jobs page of an app creates jobs (POST /job/v1/jobs) and lists
// the jobs this session created or opened, each read with GET
// /job/v1/job: the API lists no jobs, so a job made elsewhere is found
// by its id (the lookup box, or /console/apps/{key}/jobs/{id}). A job's
// page shows its progress by execution state, refreshed every 2 s
// (data-live) while the job is active or has commands under way, its
// executions page by page, and pause, resume and cancel.
const (
	// recentJobs is the most jobs the list remembers, newest first.
	recentJobs = 20
	// executionsPerPage is the job page's executions page size.
	executionsPerPage = 50
)

// execStates are an execution's states in the order the page shows
// them: not reached, under way, then ended.
var execStates = []string{"pending", "queued", "sent", "delivered", "in_progress",
	"succeeded", "failed", "timed_out", "rejected", "expired", "offline", "cancelled"}

// abortStates are the states an abort rule may name: those an execution
// ends in.
var abortStates = execStates[5:]

// execKind groups an execution state for its colour.
func execKind(state string) string {
	switch state {
	case "pending":
		return "pending"
	case "queued", "sent", "delivered", "in_progress":
		return "open"
	case "succeeded":
		return "ok"
	case "failed", "timed_out", "rejected":
		return "bad"
	}
	return "other" // expired, offline, cancelled
}

// jobActive reports whether a job in state still starts commands.
func jobActive(state string) bool {
	return state == "scheduled" || state == "running" || state == "paused"
}

// stateCount is one execution state's count in a job.
type stateCount struct {
	State string
	Kind  string
	Count int64
}

// jobView is a job as the pages show it.
type jobView struct {
	apitypes.Job
}

// States returns the job's non-zero counts (and pending always), in
// execStates order, then any state the console does not know.
func (j jobView) States() []stateCount {
	var out []stateCount
	for _, s := range execStates {
		if n, ok := j.Counts[s]; ok && (n > 0 || s == "pending") {
			out = append(out, stateCount{s, execKind(s), n})
		}
	}
	var other []string
	for s, n := range j.Counts {
		if n > 0 && !slices.Contains(execStates, s) {
			other = append(other, s)
		}
	}
	slices.Sort(other)
	for _, s := range other {
		out = append(out, stateCount{s, "other", j.Counts[s]})
	}
	return out
}

// Live reports whether the job page keeps refreshing: the job may still
// start commands, or some are under way.
func (j jobView) Live() bool {
	if jobActive(j.State) {
		return true
	}
	for s, n := range j.Counts {
		if n > 0 && execKind(s) == "open" {
			return true
		}
	}
	return false
}

// Active reports whether the job has not ended.
func (j jobView) Active() bool { return jobActive(j.State) }

// Max is the progress bars' scale.
func (j jobView) Max() int64 { return max(j.Targets, 1) }

// Bar draws the job's counts as one bar of coloured segments (inline
// SVG: the CSP allows no style attribute, and the colours follow the
// stylesheet's light and dark schemes through the segments' classes).
func (j jobView) Bar() template.HTML {
	var b strings.Builder
	states := j.States()
	var total int64
	var label []string
	for _, s := range states {
		total += s.Count
		label = append(label, fmt.Sprintf("%s %d", s.State, s.Count))
	}
	fmt.Fprintf(&b, `<svg class="job-bar" viewBox="0 0 1000 12" preserveAspectRatio="none" role="img" aria-label="%s">`,
		esc(strings.Join(label, ", ")))
	fmt.Fprintf(&b, `<rect class="job-seg-empty" x="0" y="0" width="1000" height="12"/>`)
	if total > 0 {
		var x float64
		for _, s := range states {
			w := float64(s.Count) * 1000 / float64(total)
			if w > 0 {
				fmt.Fprintf(&b, `<rect class="job-seg job-seg-%s" data-state="%s" x="%.2f" y="0" width="%.2f" height="12"><title>%s %d</title></rect>`,
					s.Kind, esc(s.State), x, w, esc(s.State), s.Count)
			}
			x += w
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// rememberJob notes that the session created or opened the app's job
// id, for the jobs list.
func (c *Console) rememberJob(sessionID, app string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[sessionID]
	if !ok {
		return
	}
	if s.jobs == nil {
		s.jobs = map[string][]int64{}
	}
	ids := append([]int64{id}, slices.DeleteFunc(slices.Clone(s.jobs[app]), func(x int64) bool { return x == id })...)
	s.jobs[app] = ids[:min(len(ids), recentJobs)]
}

// forgetJob drops a job the API no longer knows from the session's list.
func (c *Console) forgetJob(sessionID, app string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[sessionID]; ok && s.jobs != nil {
		s.jobs[app] = slices.DeleteFunc(s.jobs[app], func(x int64) bool { return x == id })
	}
}

// sessionJobs returns the ids of the session's jobs of the app, newest
// first.
func (c *Console) sessionJobs(sessionID, app string) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[sessionID]; ok {
		return slices.Clone(s.jobs[app])
	}
	return nil
}

type jobsData struct {
	Jobs   []jobView
	Note   string // why the list may be incomplete
	Lookup string // the lookup box's value after a mistake
	Error  string // the lookup's or the create form's error
	Form   url.Values
	// AbortStates are the abort rule's checkboxes.
	AbortStates []string
}

// Value is the create form's field k as last sent, or def.
func (d jobsData) Value(k, def string) string {
	if v, ok := d.Form[k]; ok && len(v) > 0 {
		return v[0]
	}
	return def
}

// Checked reports whether the abort rule's state was ticked.
func (d jobsData) Checked(state string) bool { return slices.Contains(d.Form["abort_state"], state) }

// jobsPage shows the lookup box, the app's active jobs with the
// session's others, and the create form; ?job_id= opens that job's page.
func (c *Console) jobsPage(q *req) error {
	d := jobsData{AbortStates: abortStates, Form: url.Values{}}
	if v, ok := q.r.URL.Query()["job_id"]; ok {
		id, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err == nil && id > 0 {
			http.Redirect(q.w, q.r, q.consolePath("/jobs/"+strconv.FormatInt(id, 10)), http.StatusSeeOther)
			return nil
		}
		d.Lookup, d.Error = v[0], fmt.Sprintf("A job id is a positive whole number, not %q.", v[0])
	}
	// The app's active jobs, newest first, then the session's others.
	seen := map[int64]bool{}
	var active apitypes.JobList
	err := q.appAPI(http.MethodGet, "/job/v1/jobs", nil, nil, &active)
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		d.Note = "Not every job could be read: " + ae.Message
	case err != nil:
		return err
	}
	for i := len(active.Jobs) - 1; i >= 0; i-- {
		d.Jobs = append(d.Jobs, jobView{Job: active.Jobs[i]})
		seen[active.Jobs[i].JobID] = true
	}
	for _, id := range c.sessionJobs(q.s.id, q.key) {
		if seen[id] {
			continue
		}
		var j jobView
		err := q.appAPI(http.MethodGet, "/job/v1/job", url.Values{"job_id": {strconv.FormatInt(id, 10)}}, nil, &j.Job)
		var ae *apiError
		if errors.As(err, &ae) && ae.notFound() {
			c.forgetJob(q.s.id, q.key, id)
			continue
		}
		if errors.As(err, &ae) {
			// Over the rate limit, say: the rest of the page still shows.
			d.Note = "Not every job could be read: " + ae.Message
			break
		}
		if err != nil {
			return err
		}
		d.Jobs = append(d.Jobs, j)
	}
	if f := c.takeFormFlash(q.s.id, "job-create"); f != nil {
		d.Error, d.Form = f.Message, f.Values
	}
	return q.render(http.StatusOK, "jobs", "Jobs", "jobs", d)
}

type jobData struct {
	Job        jobView
	Chart      Chart
	Executions []apitypes.JobExecution
	Next       string // the cursor of the next page, "" on the last
	Cursor     string // this page's cursor, "" on the first
	State      string // the executions filter, "" for all
	ExecError  string // why the executions could not be read
	ExecStates []string
}

// jobPage shows a job: its state and progress, a page of its
// executions and the pause, resume and cancel buttons.
func (c *Console) jobPage(q *req) error {
	id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.errorPage(q.w, q.r, q.s, http.StatusNotFound, "There is no such job: a job id is a positive whole number.")
		return nil
	}
	sid := strconv.FormatInt(id, 10)
	var d jobData
	if err := q.appAPI(http.MethodGet, "/job/v1/job", url.Values{"job_id": {sid}}, nil, &d.Job.Job); err != nil {
		return err
	}
	c.rememberJob(q.s.id, q.key, id)
	d.Chart = c.jobChart(q.key, d.Job)
	query := q.r.URL.Query()
	d.State, d.Cursor, d.ExecStates = strings.TrimSpace(query.Get("state")), query.Get("cursor"), execStates
	params := url.Values{"job_id": {sid}, "limit": {strconv.Itoa(executionsPerPage)}}
	if d.State != "" {
		params.Set("state", d.State)
	}
	if d.Cursor != "" {
		params.Set("cursor", d.Cursor)
	}
	var ex apitypes.JobExecutions
	err = q.appAPI(http.MethodGet, "/job/v1/job/executions", params, nil, &ex)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status != http.StatusUnauthorized:
		d.ExecError = ae.Message
	case err != nil:
		return err
	default:
		d.Executions, d.Next = ex.Executions, ex.Next
	}
	return q.render(http.StatusOK, "job", "Job "+sid, "jobs", d)
}

// jobChart records what the page read of the app's job and draws its
// executions started, succeeded and ended badly over the time this
// node's console watched it, as the broadcast page does.
func (c *Console) jobChart(app string, j jobView) Chart {
	var started, ok, bad int64
	for s, n := range j.Counts {
		switch execKind(s) {
		case "pending":
		case "ok":
			ok += n
			started += n
		case "bad":
			bad += n
			started += n
		default:
			started += n
		}
	}
	run := c.progress.record("job:"+app+"/"+strconv.FormatInt(j.JobID, 10),
		progressSample{At: time.Now(), Queued: started, Delivered: ok, Failed: bad})
	ch := Chart{ID: "job-chart", Title: "Executions over time",
		Empty: "The chart fills in while this page is open: this node's console draws what it reads of the job every 2 seconds."}
	return drawProgress(ch, [3]string{"started", "succeeded", "failed"}, time.UnixMilli(j.TimeCreate), run)
}

// PageQuery is the query of the executions page at cursor, keeping the
// filter.
func (d jobData) PageQuery(cursor string) string {
	v := url.Values{}
	if d.State != "" {
		v.Set("state", d.State)
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// createJob sends the form's job; on success the job's page shows it,
// and on a refusal the form comes back filled in, with the API's
// message beside it.
func (c *Console) createJob(q *req) (string, error) {
	back := q.consolePath("/jobs")
	body, err := jobRequest(q.r.PostForm)
	if err == nil {
		var out apitypes.JobCreated
		if err = q.appAPI(http.MethodPost, "/job/v1/jobs", nil, body, &out); err == nil {
			c.rememberJob(q.s.id, q.key, out.JobID)
			c.setFlash(q.s.id, &flash{Kind: "ok", Message: fmt.Sprintf("Job %d accepted for %d devices.", out.JobID, out.Targets)})
			return q.consolePath("/jobs/" + strconv.FormatInt(out.JobID, 10)), nil
		}
	}
	var ae *apiError
	if (errors.As(err, &ae) && ae.Status != http.StatusUnauthorized) || errors.As(err, new(*userError)) {
		form := url.Values{}
		for k, v := range q.r.PostForm {
			if k != "csrf" {
				form[k] = v
			}
		}
		c.setFlash(q.s.id, &flash{Kind: "error", Message: err.Error(), Form: "job-create", Values: form})
		return back + "#job-create-h", nil
	}
	return back, err
}

// jobRequest builds the API's request from the create form. Only what
// the API cannot be sent is refused here (a number that is not one,
// params that are not JSON); every range is the API's to check, so its
// message is the one shown.
func jobRequest(form url.Values) (apitypes.JobRequest, error) {
	get := func(k string) string { return strings.TrimSpace(form.Get(k)) }
	body := apitypes.JobRequest{SeqNo: seqNo(), Target: apitypes.JobTarget{All: true}}
	if get("target") != "all" {
		if get("tag") == "" {
			return body, userErrorf("Name a tag, or choose every device.")
		}
		body.Target = apitypes.JobTarget{Tag: get("tag")}
	}
	body.Command.Name = get("name")
	if p := get("params"); p != "" {
		if !json.Valid([]byte(p)) {
			return body, userErrorf("Params must be JSON (a string in double quotes, a number, an object...), or empty for none.")
		}
		body.Command.Params = []byte(p)
	}
	var rollout apitypes.JobRollout
	var err error
	ints := []struct {
		field string
		into  **int64
	}{{"timeout", &body.Command.Timeout}, {"ttl", &body.TTL}, {"rate", &rollout.Rate}}
	for _, f := range ints {
		if *f.into, err = optInt(f.field, get(f.field)); err != nil {
			return body, err
		}
	}
	if rollout.Ramp, err = rampOf(get); err != nil {
		return body, err
	}
	if rollout.Rate != nil || rollout.Ramp != nil {
		body.Rollout = &rollout
	}
	if body.Abort, err = abortOf(form, get); err != nil {
		return body, err
	}
	if body.Retries, err = retriesOf(get); err != nil {
		return body, err
	}
	if body.StartAt, err = startAtOf(get("start_at")); err != nil {
		return body, err
	}
	return body, nil
}

// optInt parses an optional whole number; "" is nil.
func optInt(field, v string) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, userErrorf("%s must be a whole number, not %q.", field, v)
	}
	return &n, nil
}

func optFloat(field, v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, userErrorf("%s must be a number, not %q.", field, v)
	}
	return f, nil
}

// rampOf is the form's ramp: none when its three fields are empty.
func rampOf(get func(string) string) (*apitypes.JobRamp, error) {
	if get("ramp_start") == "" && get("ramp_factor") == "" && get("ramp_every") == "" {
		return nil, nil
	}
	var r apitypes.JobRamp
	for _, f := range []struct {
		field string
		into  *int64
	}{{"ramp_start", &r.Start}, {"ramp_every", &r.Every}} {
		n, err := optInt(f.field, get(f.field))
		if err != nil {
			return nil, err
		}
		if n != nil {
			*f.into = *n
		}
	}
	var err error
	r.Factor, err = optFloat("ramp_factor", get("ramp_factor"))
	return &r, err
}

// abortOf is the form's abort rule: none when no state is ticked and
// the numbers are empty.
func abortOf(form url.Values, get func(string) string) ([]apitypes.JobAbort, error) {
	states := form["abort_state"]
	if len(states) == 0 && get("abort_percent") == "" && get("abort_min_done") == "" {
		return nil, nil
	}
	if get("abort_percent") == "" {
		// The body cannot leave percent out, and 0 would abort the job
		// at the first execution to end in a ticked state.
		return nil, userErrorf("Enter the abort rule's percent (0 to 100): the job aborts when more than that share of its ended executions are in the ticked states.")
	}
	a := apitypes.JobAbort{States: append([]string{}, states...)}
	var err error
	if a.Percent, err = optFloat("abort_percent", get("abort_percent")); err != nil {
		return nil, err
	}
	n, err := optInt("abort_min_done", get("abort_min_done"))
	if err != nil {
		return nil, err
	}
	if n != nil {
		a.MinDone = *n
	}
	return []apitypes.JobAbort{a}, nil
}

// retriesOf is the form's retries: none when both are empty or 0.
func retriesOf(get func(string) string) (*apitypes.JobRetries, error) {
	var r apitypes.JobRetries
	for _, f := range []struct {
		field string
		into  *int
	}{{"retry_failed", &r.Failed}, {"retry_timed_out", &r.TimedOut}} {
		n, err := optInt(f.field, get(f.field))
		if err != nil {
			return nil, err
		}
		if n != nil {
			if *n < -1<<31 || *n > 1<<31-1 {
				return nil, userErrorf("%s is out of range.", f.field)
			}
			*f.into = int(*n)
		}
	}
	if r == (apitypes.JobRetries{}) {
		return nil, nil
	}
	return &r, nil
}

// startAtOf reads the form's start time, in UTC, as Unix seconds; ""
// is nil (start now).
func startAtOf(v string) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			s := t.Unix()
			return &s, nil
		}
	}
	return nil, userErrorf("start_at must be a date and time in UTC like 2026-01-31T14:30, not %q.", v)
}

// jobAction pauses, resumes or cancels the form's job (POST
// /job/v1/job/pause, /resume, /cancel) and goes back to its page; done
// says what was done, and state is the job's state after it.
func (c *Console) jobAction(verb, done, state string) actionFunc {
	return func(q *req) (string, error) {
		id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			return q.consolePath("/jobs"), userErrorf("There is no such job: a job id is a positive whole number.")
		}
		back := q.consolePath("/jobs/" + strconv.FormatInt(id, 10))
		var out apitypes.Job
		if err := q.appAPI(http.MethodPost, "/job/v1/job/"+verb, nil, apitypes.JobRef{JobID: id}, &out); err != nil {
			return back, err
		}
		msg := fmt.Sprintf("Job %d %s.", id, done)
		if out.State != state {
			// Resumed before its start time, or cancelled after it ended.
			msg = fmt.Sprintf("Job %d is %s.", id, out.State)
		}
		c.setFlash(q.s.id, &flash{Kind: "ok", Message: msg})
		return back, nil
	}
}
