package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/store"
)

// MaxStartAhead is how far ahead a job's start_at may be: far enough for
// any plan, near enough that Unix milliseconds sent by mistake (a time
// some 50,000 years ahead) are refused rather than never started.
const MaxStartAhead = 366 * 24 * time.Hour

// jobLimitRetry is the Retry-After (s) of a job refused for the app's
// limit of active jobs.
const jobLimitRetry = 60

// Limits of GET /job/v1/job/executions.
const (
	DefaultExecutionsLimit = 100
	MaxExecutionsLimit     = 1000
)

// executionStates are the states GET /job/v1/job/executions filters by:
// those of a command, and pending for a target not yet reached.
var executionStates = []string{store.ExecPending, store.CmdQueued, store.CmdSent, store.CmdDelivered, store.CmdInProgress,
	store.CmdSucceeded, store.CmdFailed, store.CmdTimedOut, store.CmdExpired, store.CmdOffline, store.CmdRejected, store.CmdCancelled}

// createJob serves POST /job/v1/jobs (docs/jobs.md): the job is stored
// with its targets before the 200. seq_no as for a broadcast.
func (a *API) createJob(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	seqNo, _, err := obj.int64Field("seq_no", true)
	if err != nil {
		return err
	}
	spec, err := parseJob(obj, a.now())
	if err != nil {
		return err
	}
	app := currentApp(c)
	fp := fingerprint("POST /job/v1/jobs", obj)
	if done, err := a.replay(c, app.Key, seqNo, fp); done || err != nil {
		return err
	}
	j, err := a.jobs.Create(c.Request.Context(), app, spec, seqNo, func(id, targets int64) *store.SeqEntry {
		return a.seqEntry(fp, mustJSON(apitypes.JobCreated{JobID: id, Targets: targets}))
	})
	if errors.Is(err, job.ErrTooMany) {
		// A job ends when its work is done, at no time known ahead: the
		// Retry-After every 429 carries is a minute.
		return &apiError{http.StatusTooManyRequests, CodeRateLimited,
			err.Error() + " (at most " + strconv.Itoa(job.MaxActive) + " at once): wait for one to end, or cancel one", jobLimitRetry}
	}
	if err != nil {
		return a.seqFailed(c, app.Key, seqNo, fp, err)
	}
	return writeJSON(c, apitypes.JobCreated{JobID: j.ID, Targets: j.Targets})
}

// parseJob reads the body of POST /job/v1/jobs, each error naming its
// field: the JSON types, the target and the command's rules. The ranges
// of rollout and abort are job.Spec.Validate's, which Create applies.
func parseJob(obj object, now time.Time) (job.Spec, error) {
	spec := job.Spec{Rate: job.DefaultRate}
	var err error
	if spec.Target, err = parseJobTarget(obj); err != nil {
		return spec, err
	}
	if spec.Command, err = parseJobCommand(obj); err != nil {
		return spec, err
	}
	if spec.TTL, err = intRange(obj, "ttl", command.DefaultTTL, 0, command.MaxTTL); err != nil {
		return spec, err
	}
	if spec.StartAt, err = parseStartAt(obj, now); err != nil {
		return spec, err
	}
	if err := parseRollout(obj, &spec); err != nil {
		return spec, err
	}
	if spec.Abort, err = parseAbort(obj); err != nil {
		return spec, err
	}
	spec.Retries, err = parseRetries(obj)
	return spec, err
}

// member reads obj's field as a JSON object whose fields are named with
// the field's path in messages ("command.name"): required says whether
// an absent one is 1002.
func (o object) member(field string, required bool) (object, bool, error) {
	if !o.has(field) {
		if required {
			return nil, false, errMissing(field)
		}
		return nil, false, nil
	}
	sub, err := parseObject(o[field], field)
	if err != nil {
		return nil, false, err
	}
	out := make(object, len(sub))
	for k, v := range sub {
		out[field+"."+k] = v
	}
	return out, true, nil
}

// numberField reads a JSON number field.
func (o object) numberField(field string, required bool) (float64, bool, error) {
	if !o.has(field) {
		if required {
			return 0, false, errMissing(field)
		}
		return 0, false, nil
	}
	var f float64
	if raw := o[field]; raw[0] == '"' || json.Unmarshal(raw, &f) != nil {
		return 0, false, errInvalid("%s must be a number", field)
	}
	return f, true, nil
}

// parseJobTarget reads target: exactly one of tag, all (true) and
// device_names.
func parseJobTarget(obj object) (job.Target, error) {
	t, _, err := obj.member("target", true)
	if err != nil {
		return job.Target{}, err
	}
	n := 0
	for _, k := range []string{"target.tag", "target.all", "target.device_names"} {
		if t.has(k) {
			n++
		}
	}
	if n != 1 {
		return job.Target{}, errInvalid("target must hold exactly one of tag (a string), all (true) and device_names (a list of names)")
	}
	switch {
	case t.has("target.tag"):
		tag, _, err := t.stringField("target.tag", true)
		if err != nil {
			return job.Target{}, err
		}
		return job.Target{Tag: tag}, devices.ValidateTag("target.tag", tag)
	case t.has("target.all"):
		if all, _, err := t.boolField("target.all", true); err != nil || !all {
			return job.Target{}, errInvalid("target.all must be true")
		}
		return job.Target{All: true}, nil
	}
	raw := t["target.device_names"]
	names, ok := stringArray(raw)
	if !ok {
		return job.Target{}, errInvalid("target.device_names must be an array of device names")
	}
	if !validJSONText(raw) {
		return job.Target{}, errNotText("target.device_names")
	}
	if len(names) == 0 || len(names) > job.MaxListTargets {
		return job.Target{}, errInvalid("target.device_names must hold 1 to %d names, got %d", job.MaxListTargets, len(names))
	}
	return job.Target{Names: names}, nil
}

// parseJobCommand reads command: name, params and timeout as for POST
// /cmd/v1/cmd.
func parseJobCommand(obj object) (store.JobCommand, error) {
	var out store.JobCommand
	cmd, _, err := obj.member("command", true)
	if err != nil {
		return out, err
	}
	if out.Name, err = commandName(cmd, "command.name"); err != nil {
		return out, err
	}
	if out.Params, err = commandParams(cmd, "command.params"); err != nil {
		return out, err
	}
	out.Timeout, err = intRange(cmd, "command.timeout", command.DefaultTimeout, command.MinTimeout, command.MaxTimeout)
	return out, err
}

// parseStartAt reads the optional start_at, Unix seconds; 0 is now.
func parseStartAt(obj object, now time.Time) (int64, error) {
	at, _, err := obj.int64Field("start_at", false)
	if err != nil {
		return 0, err
	}
	if limit := now.Add(MaxStartAhead).Unix(); at < 0 || at > limit {
		return 0, errInvalid("start_at must be Unix seconds from 0 (now) to %d (%d days ahead), got %d",
			limit, int(MaxStartAhead.Hours()/24), at)
	}
	return at, nil
}

// parseRollout reads rollout: rate and its optional ramp.
func parseRollout(obj object, spec *job.Spec) error {
	ro, ok, err := obj.member("rollout", false)
	if !ok || err != nil {
		return err
	}
	if rate, ok, err := ro.int64Field("rollout.rate", false); err != nil {
		return err
	} else if ok {
		spec.Rate = rate
	}
	rp, ok, err := ro.member("rollout.ramp", false)
	if !ok || err != nil {
		return err
	}
	var r store.JobRamp
	if r.Start, _, err = rp.int64Field("rollout.ramp.start", true); err != nil {
		return err
	}
	if r.Factor, _, err = rp.numberField("rollout.ramp.factor", true); err != nil {
		return err
	}
	if r.Every, _, err = rp.int64Field("rollout.ramp.every", true); err != nil {
		return err
	}
	spec.Ramp = &r
	return nil
}

// parseAbort reads abort: a list of rules, each states, percent and
// min_done (default 0).
func parseAbort(obj object) ([]store.JobAbort, error) {
	if !obj.has("abort") {
		return nil, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(obj["abort"], &elems); err != nil || elems == nil {
		return nil, errInvalid("abort must be an array of rules")
	}
	out := make([]store.JobAbort, len(elems))
	var ok bool
	for i, el := range elems {
		f := "abort[" + strconv.Itoa(i) + "]"
		rule, _, err := object{f: el}.member(f, true)
		if err != nil {
			return nil, err
		}
		if !rule.has(f + ".states") {
			return nil, errMissing(f + ".states")
		}
		if out[i].States, ok = stringArray(rule[f+".states"]); !ok {
			return nil, errInvalid("%s.states must be an array of states", f)
		}
		if out[i].Percent, _, err = rule.numberField(f+".percent", true); err != nil {
			return nil, err
		}
		if out[i].MinDone, _, err = rule.int64Field(f+".min_done", false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseRetries reads retries: new attempts for each state retried.
func parseRetries(obj object) (map[string]int, error) {
	rt, ok, err := obj.member("retries", false)
	if !ok || err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, st := range job.RetryStates {
		n, ok, err := rt.int64Field("retries."+st, false)
		if err != nil {
			return nil, err
		}
		if ok {
			// Checked here too: an int64 beyond int would not reach Validate as sent.
			if n < 0 || n > job.MaxRetries {
				return nil, errInvalid("retries.%s must be 0 to %d, got %d", st, job.MaxRetries, n)
			}
			out[st] = int(n)
		}
	}
	return out, nil
}

// viewJob is j as the API shows it.
func viewJob(j store.Job) apitypes.Job {
	return apitypes.Job{JobID: j.ID, State: j.State, Targets: j.Targets, Counts: j.Counts, AbortReason: j.AbortReason,
		TimeCreate: j.TimeCreate, TimeDone: j.TimeDone}
}

// getJob serves GET /job/v1/job?job_id=N.
func (a *API) getJob(c *gin.Context) error {
	id, err := idParam(c, "job_id")
	if err != nil {
		return err
	}
	j, err := a.jobs.Get(c.Request.Context(), currentApp(c).Key, id)
	if err != nil {
		return err
	}
	return a.writeRead(c, viewJob(j))
}

// listJobs serves GET /job/v1/jobs: the app's active jobs, so that a
// job whose id was lost can be found (and cancelled) while it counts
// against the app's limit.
func (a *API) listJobs(c *gin.Context) error {
	js, err := a.jobs.Active(c.Request.Context(), currentApp(c).Key)
	if err != nil {
		return err
	}
	out := apitypes.JobList{Jobs: make([]apitypes.Job, len(js))}
	for i, j := range js {
		out.Jobs[i] = viewJob(j)
	}
	return a.writeRead(c, out)
}

// getExecutions serves GET /job/v1/job/executions?job_id=N&state=S&cursor=C&limit=L.
func (a *API) getExecutions(c *gin.Context) error {
	id, err := idParam(c, "job_id")
	if err != nil {
		return err
	}
	state := c.Query("state")
	if state != "" && !slices.Contains(executionStates, state) {
		return errInvalid("state must be one of %s, got %q", strings.Join(executionStates, ", "), state)
	}
	var from int64
	if s := c.Query("cursor"); s != "" {
		if from, err = strconv.ParseInt(s, 10, 64); err != nil || from < 0 {
			return errInvalid("cursor must be the next of an earlier page, got %q", s)
		}
	}
	limit := DefaultExecutionsLimit
	if s, ok := c.GetQuery("limit"); ok {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > MaxExecutionsLimit {
			return errInvalid("limit must be an integer from 1 to %d, got %q", MaxExecutionsLimit, s)
		}
	}
	execs, next, err := a.jobs.Executions(c.Request.Context(), currentApp(c).Key, id, state, from, limit)
	if err != nil {
		return err
	}
	out := apitypes.JobExecutions{Executions: make([]apitypes.JobExecution, len(execs))}
	for i, e := range execs {
		out.Executions[i] = apitypes.JobExecution{DeviceName: e.DeviceName, CmdID: e.CmdID, State: e.State, Code: e.Code,
			Attempt: e.Attempt, TimeDone: e.TimeDone}
	}
	if next >= 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	return a.writeRead(c, out)
}

// changeJob serves POST /job/v1/job/pause, /resume and /cancel with
// change ((*job.Service).Pause...): the job as it stands afterwards.
func (a *API) changeJob(change func(*job.Service, context.Context, string, int64) (store.Job, error)) handlerFunc {
	return func(c *gin.Context) error {
		obj, err := readBody(c)
		if err != nil {
			return err
		}
		id, _, err := obj.int64Field("job_id", true)
		if err != nil {
			return err
		}
		if id < 1 {
			return errInvalid("job_id must be a positive integer, got %d", id)
		}
		j, err := change(a.jobs, c.Request.Context(), currentApp(c).Key, id)
		if err != nil {
			return err
		}
		return a.writeRead(c, viewJob(j))
	}
}
