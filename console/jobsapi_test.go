package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// newJobsEnv is the console over the real API on the in-memory store
// (the contract's reference backend for jobs), with the jobs' runner
// started. Where the API does not serve a /job/v1 route yet ("no such
// endpoint"), jobsStandIn answers it as docs/api.md's contract says, on
// the same job.Service the API was given: once restapi serves the
// routes, every call reaches it and the stand-in is unused.
func newJobsEnv(t *testing.T) *env {
	t.Helper()
	st := memory.New()
	var runner *job.Runner
	e := newEnvOn(t, st, nil, func(api http.Handler, cfg restapi.Config) http.Handler {
		runner = cfg.Jobs.Runner()
		return jobsStandIn{api: api, st: st, jobs: cfg.Jobs}
	})
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runner.Stop)
	return e
}

// jobsStandIn serves POST /job/v1/jobs, GET /job/v1/job, GET
// /job/v1/job/executions and POST /job/v1/job/pause|resume|cancel with
// the bodies of apitypes/jobs.go, for as long as api answers them "no
// such endpoint".
type jobsStandIn struct {
	api  http.Handler
	st   store.Store
	jobs *job.Service
}

func (s jobsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/job/v1/") {
		s.api.ServeHTTP(w, r)
		return
	}
	// Try the API first: the body is read at most once, so keep it.
	var body []byte
	if r.Body != nil {
		body, _ = readAll(r)
	}
	rec := httptest.NewRecorder()
	s.api.ServeHTTP(rec, cloneWithBody(r, body))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no such endpoint") {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		return
	}
	out, err := s.serve(r, body)
	if err != nil {
		errdefs.Record(r.Context(), err)
		status, code := http.StatusBadRequest, restapi.CodeInvalidParam
		var nf *errdefs.NotFoundError
		var cf *errdefs.ConflictError
		var iv *errdefs.InvalidError
		switch {
		case errors.Is(err, errStandInAuth):
			status, code = http.StatusUnauthorized, restapi.CodeAuthFailed
		case errors.As(err, &nf), errors.As(err, &cf), errors.As(err, &iv), errors.Is(err, job.ErrTooMany), errors.Is(err, errStandInBad):
		default:
			status, code = http.StatusInternalServerError, restapi.CodeInternal
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(restapi.ErrorBody(code, err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

var (
	errStandInAuth = errors.New("wrong app key or master secret")
	errStandInBad  = errors.New("bad request")
)

func (s jobsStandIn) serve(r *http.Request, body []byte) (any, error) {
	ctx := r.Context()
	key, secret, _ := r.BasicAuth()
	app, err := s.st.GetApp(ctx, key)
	if err != nil || app.MasterSecret != secret {
		return nil, errStandInAuth
	}
	idParam := func() (int64, error) {
		id, err := strconv.ParseInt(r.URL.Query().Get("job_id"), 10, 64)
		if err != nil {
			return 0, errdefs.Invalid("job_id", "job_id must be a job's id")
		}
		return id, nil
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /job/v1/jobs":
		var req apitypes.JobRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, errdefs.Invalid("body", "the body is not a job request: %v", err)
		}
		spec, err := specOf(req)
		if err != nil {
			return nil, err
		}
		j, err := s.jobs.Create(ctx, app, spec, req.SeqNo, nil)
		if err != nil {
			return nil, err
		}
		return apitypes.JobCreated{JobID: j.ID, Targets: j.Targets}, nil
	case "GET /job/v1/job":
		id, err := idParam()
		if err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(ctx, key, id)
		return jobOut(j), err
	case "GET /job/v1/job/executions":
		id, err := idParam()
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		var from int64
		if c := q.Get("cursor"); c != "" {
			if from, err = strconv.ParseInt(c, 10, 64); err != nil {
				return nil, errdefs.Invalid("cursor", "cursor %q is not one this API gave", c)
			}
		}
		limit, _ := strconv.Atoi(q.Get("limit"))
		if limit <= 0 || limit > 1000 {
			limit = 100
		}
		state := q.Get("state")
		if state != "" && !strings.Contains(" "+strings.Join(execStates, " ")+" ", " "+state+" ") {
			return nil, errdefs.Invalid("state", "state %q is not an execution state", state)
		}
		execs, next, err := s.jobs.Executions(ctx, key, id, state, from, limit)
		if err != nil {
			return nil, err
		}
		out := apitypes.JobExecutions{Executions: []apitypes.JobExecution{}}
		for _, e := range execs {
			out.Executions = append(out.Executions, apitypes.JobExecution{DeviceName: e.DeviceName, CmdID: e.CmdID,
				State: e.State, Code: e.Code, Attempt: e.Attempt, TimeDone: e.TimeDone})
		}
		if next >= 0 {
			out.Next = strconv.FormatInt(next, 10)
		}
		return out, nil
	case "POST /job/v1/job/pause", "POST /job/v1/job/resume", "POST /job/v1/job/cancel":
		var ref apitypes.JobRef
		if err := json.Unmarshal(body, &ref); err != nil {
			return nil, errdefs.Invalid("job_id", "the body must be {\"job_id\":N}")
		}
		change := map[string]func(r *http.Request) (store.Job, error){
			"pause":  func(r *http.Request) (store.Job, error) { return s.jobs.Pause(r.Context(), key, ref.JobID) },
			"resume": func(r *http.Request) (store.Job, error) { return s.jobs.Resume(r.Context(), key, ref.JobID) },
			"cancel": func(r *http.Request) (store.Job, error) { return s.jobs.Cancel(r.Context(), key, ref.JobID) },
		}[r.URL.Path[len("/job/v1/job/"):]]
		j, err := change(r)
		return jobOut(j), err
	}
	return nil, errStandInBad
}

// specOf turns a request into a job.Spec with the documented defaults.
func specOf(req apitypes.JobRequest) (job.Spec, error) {
	spec := job.Spec{Command: store.JobCommand{Name: req.Command.Name, Params: req.Command.Params, Timeout: command.DefaultTimeout},
		TTL: command.DefaultTTL, Rate: job.DefaultRate}
	if req.Command.Name == "" {
		return spec, errdefs.Invalid("command.name", "command.name is required")
	}
	switch {
	case req.Target.All:
		spec.Target.All = true
	case req.Target.Tag != "":
		spec.Target.Tag = req.Target.Tag
	case req.Target.DeviceNames != nil:
		spec.Target.Names = req.Target.DeviceNames
	default:
		return spec, errdefs.Invalid("target", "target must name a tag, all, or device_names")
	}
	if t := req.Command.Timeout; t != nil {
		if *t < command.MinTimeout || *t > command.MaxTimeout {
			return spec, errdefs.Invalid("command.timeout", "command.timeout must be %d to %d s, got %d", command.MinTimeout, command.MaxTimeout, *t)
		}
		spec.Command.Timeout = *t
	}
	if req.TTL != nil {
		spec.TTL = *req.TTL
	}
	if req.StartAt != nil {
		spec.StartAt = *req.StartAt
	}
	if ro := req.Rollout; ro != nil {
		if ro.Rate != nil {
			spec.Rate = *ro.Rate
		}
		if ro.Ramp != nil {
			spec.Ramp = &store.JobRamp{Start: ro.Ramp.Start, Factor: ro.Ramp.Factor, Every: ro.Ramp.Every}
		}
	}
	for _, a := range req.Abort {
		spec.Abort = append(spec.Abort, store.JobAbort{States: a.States, Percent: a.Percent, MinDone: a.MinDone})
	}
	if rt := req.Retries; rt != nil {
		spec.Retries = map[string]int{store.CmdFailed: rt.Failed, store.CmdTimedOut: rt.TimedOut}
	}
	return spec, nil
}

func jobOut(j store.Job) apitypes.Job {
	return apitypes.Job{JobID: j.ID, State: j.State, Targets: j.Targets, Counts: j.Counts,
		AbortReason: j.AbortReason, TimeCreate: j.TimeCreate, TimeDone: j.TimeDone}
}

func TestJobsStandInDefersToTheAPI(t *testing.T) {
	// The stand-in answers only what the API answers "no such endpoint".
	e := newJobsEnv(t)
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, httptest.NewRequest("GET", "/device/v1/baseinfo?device_name=x", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("a non-job route without credentials: %d", rec.Code)
	}
}

func readAll(r *http.Request) ([]byte, error) {
	defer r.Body.Close()
	return io.ReadAll(r.Body)
}

// cloneWithBody is r with a fresh reader over body.
func cloneWithBody(r *http.Request, body []byte) *http.Request {
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(body))
	return c
}
