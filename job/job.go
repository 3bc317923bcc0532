package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
)

// Limits of a job request, as docs/jobs.md states them.
const (
	MaxListTargets = 10000
	MinRate        = 1
	MaxRate        = 1000000
	DefaultRate    = 1000
	MinFactor      = 1.1
	MaxFactor      = 5
	MaxRetries     = 10
	MaxAbortRules  = 10
	// MaxActive is the most jobs an app may have scheduled, running or
	// paused at once.
	MaxActive = 10
)

// EventDone is the event type a job adds to the event log as it ends.
const EventDone = events.TypeJobDone

// Target selects a job's devices: a tag, all of the app's, or a list of
// names.
type Target struct {
	Tag   string
	All   bool
	Names []string
}

// Spec is a validated job request.
type Spec struct {
	Target  Target
	Command store.JobCommand
	TTL     int64
	StartAt int64 // Unix s, 0 for now
	Rate    int64
	Ramp    *store.JobRamp
	Abort   []store.JobAbort
	Retries map[string]int
}

// RetryStates are the states an execution may be retried from.
var RetryStates = []string{store.CmdFailed, store.CmdTimedOut}

// finalStates are the command states an execution ends in.
var finalStates = []string{store.CmdSucceeded, store.CmdFailed, store.CmdTimedOut, store.CmdExpired,
	store.CmdOffline, store.CmdRejected, store.CmdCancelled}

// openStates are the command states of an execution under way.
var openStates = []string{store.CmdQueued, store.CmdSent, store.CmdDelivered, store.CmdInProgress}

// Validate checks the parts of s a parser cannot: ranges and the states
// an abort rule names. Errors are *errdefs.InvalidError naming the field.
func (s *Spec) Validate() error {
	if s.Rate < MinRate || s.Rate > MaxRate {
		return invalid("rollout.rate", "rollout.rate must be %d to %d commands a minute, got %d", MinRate, MaxRate, s.Rate)
	}
	if r := s.Ramp; r != nil {
		switch {
		case r.Start < MinRate || r.Start > s.Rate:
			return invalid("rollout.ramp.start", "rollout.ramp.start must be %d to rollout.rate (%d) commands a minute, got %d", MinRate, s.Rate, r.Start)
		case math.IsNaN(r.Factor) || r.Factor < MinFactor || r.Factor > MaxFactor:
			return invalid("rollout.ramp.factor", "rollout.ramp.factor must be %v to %v, got %v", MinFactor, MaxFactor, r.Factor)
		case r.Every < 1:
			return invalid("rollout.ramp.every", "rollout.ramp.every must be at least 1 succeeded execution, got %d", r.Every)
		}
	}
	if len(s.Abort) > MaxAbortRules {
		return invalid("abort", "abort holds at most %d rules, got %d", MaxAbortRules, len(s.Abort))
	}
	for i, a := range s.Abort {
		f := "abort[" + strconv.Itoa(i) + "]"
		if len(a.States) == 0 {
			return invalid(f+".states", "%s.states must name at least one state", f)
		}
		for _, st := range a.States {
			if !isFinal(st) {
				return invalid(f+".states", "%s.states: %q is not a state an execution ends in (%s)", f, st, strings.Join(finalStates, ", "))
			}
		}
		if math.IsNaN(a.Percent) || a.Percent < 0 || a.Percent > 100 || decimals(a.Percent) > 2 {
			return invalid(f+".percent", "%s.percent must be 0 to 100 with at most two decimals, got %v", f, a.Percent)
		}
		if a.MinDone < 0 {
			return invalid(f+".min_done", "%s.min_done must be 0 or more, got %d", f, a.MinDone)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(s.Retries)) {
		if n := s.Retries[st]; n < 0 || n > MaxRetries {
			return invalid("retries."+st, "retries.%s must be 0 to %d, got %d", st, MaxRetries, n)
		}
	}
	return nil
}

// invalid is an *errdefs.InvalidError for field whose message is
// format's whole: the messages here name their field themselves.
func invalid(field, format string, args ...any) error {
	return &errdefs.InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// decimals counts the decimals of f as its shortest form spells it:
// 0.29 has two, though 0.29*100 is not a whole float64.
func decimals(f float64) int {
	_, frac, _ := strings.Cut(strconv.FormatFloat(f, 'f', -1, 64), ".")
	return len(frac)
}

func isFinal(state string) bool {
	for _, s := range finalStates {
		if s == state {
			return true
		}
	}
	return false
}

// Store is what jobs need of the store.
type Store interface {
	EnabledNames(ctx context.Context, appKey, tag string) ([]string, error)
	GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error)
	store.Jobs
}

var _ Store = store.Store(nil)

// Commands is what jobs need of the command domain.
type Commands interface {
	StartJob(ctx context.Context, j store.Job, next int64, targets []command.JobTarget) ([]store.Command, error)
	Cancel(ctx context.Context, appKey string, id int64) (store.Command, error)
}

var _ Commands = (*command.Service)(nil)

// Service accepts jobs and changes their state; its Runner carries them
// out.
type Service struct {
	store  Store
	ids    *idgen.Generator
	runner *Runner
	now    func() time.Time

	// creating holds an app's creates one at a time on this node, from
	// the count of its active jobs to the write of the new one: without
	// it, concurrent creates would all count the same jobs and all pass
	// MaxActive.
	creating [64]sync.Mutex
	seed     maphash.Seed
}

// NewService returns a Service storing in st, numbering jobs with ids
// and waking runner when a job needs it at once.
func NewService(st Store, ids *idgen.Generator, runner *Runner) *Service {
	return &Service{store: st, ids: ids, runner: runner, now: time.Now, seed: maphash.MakeSeed()}
}

// SetClock has s take the time from now; for tests.
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// Runner returns the runner the Service wakes.
func (s *Service) Runner() *Runner { return s.runner }

// Create accepts spec for app: its targets are fixed now (disabled
// devices left out of a tag or all; a list's names must all exist), and
// the job is stored with them and the seq_no entry seqFor builds, in
// one durable write. A list naming an unknown or repeated device is an
// *errdefs.InvalidError naming it.
func (s *Service) Create(ctx context.Context, app store.App, spec Spec, seqNo int64, seqFor func(id, targets int64) *store.SeqEntry) (store.Job, error) {
	if err := spec.Validate(); err != nil {
		return store.Job{}, err
	}
	mu := &s.creating[maphash.String(s.seed, app.Key)%uint64(len(s.creating))]
	mu.Lock()
	defer mu.Unlock()
	active, err := s.store.ActiveJobs(ctx)
	if err != nil {
		return store.Job{}, fmt.Errorf("list active jobs: %w", err)
	}
	n := 0
	for _, j := range active {
		if j.AppKey == app.Key && store.JobActive(j.State) {
			n++
		}
	}
	if n >= MaxActive {
		return store.Job{}, ErrTooMany
	}
	targets, err := s.targets(ctx, app.Key, spec.Target)
	if err != nil {
		return store.Job{}, err
	}
	now := s.now()
	j := store.Job{
		ID: s.ids.Next(), AppKey: app.Key, State: store.JobRunning, Tag: spec.Target.Tag, All: spec.Target.All,
		Targets: int64(len(targets)), Command: spec.Command, TTL: spec.TTL, StartAt: spec.StartAt,
		Rate: spec.Rate, Ramp: spec.Ramp, Abort: spec.Abort, Retries: spec.Retries,
		TimeCreate: now.UnixMilli(),
	}
	if spec.StartAt > now.Unix() {
		j.State = store.JobScheduled
	}
	var seq *store.SeqEntry
	if seqFor != nil {
		seq = seqFor(j.ID, j.Targets)
	}
	if err := s.store.CreateJob(ctx, j, targets, seqNo, seq); err != nil {
		return store.Job{}, err
	}
	s.runner.Wake()
	store.FillCounts(&j, nil)
	return j, nil
}

// ErrTooMany refuses a job beyond MaxActive.
var ErrTooMany = errors.New("the app already has " + strconv.Itoa(MaxActive) + " jobs scheduled, running or paused")

// targets returns the names t selects in app now.
func (s *Service) targets(ctx context.Context, appKey string, t Target) ([]string, error) {
	if t.Names == nil {
		names, err := s.store.EnabledNames(ctx, appKey, t.Tag)
		if err != nil {
			return nil, fmt.Errorf("read targets: %w", err)
		}
		return names, nil
	}
	seen := make(map[string]bool, len(t.Names))
	for i, n := range t.Names {
		if seen[n] {
			return nil, invalid("target.device_names", "target.device_names[%d]: device %q repeated", i, n)
		}
		seen[n] = true
	}
	devs, err := s.store.GetDevices(ctx, appKey, t.Names)
	if err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	found := make(map[string]store.Device, len(devs))
	for _, d := range devs {
		found[d.Name] = d
	}
	out := make([]string, 0, len(t.Names))
	for i, n := range t.Names {
		d, ok := found[n]
		if !ok {
			return nil, invalid("target.device_names", "target.device_names[%d]: device %q not found", i, n)
		}
		if d.Flag != store.FlagDisabled {
			out = append(out, n)
		}
	}
	return out, nil
}

// Get returns the app's job id; a *errdefs.NotFoundError if there is
// none.
func (s *Service) Get(ctx context.Context, appKey string, id int64) (store.Job, error) {
	j, err := s.store.GetJob(ctx, appKey, id)
	return j, jobErr(id, err)
}

// Active returns the app's jobs that are scheduled, running or paused,
// oldest first: the jobs that count against MaxActive.
func (s *Service) Active(ctx context.Context, appKey string) ([]store.Job, error) {
	all, err := s.store.ActiveJobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list active jobs: %w", err)
	}
	var out []store.Job
	for _, j := range all {
		if j.AppKey == appKey && store.JobActive(j.State) {
			out = append(out, j)
		}
	}
	return out, nil
}

func jobErr(id int64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return errdefs.NotFound("job", id)
	}
	return fmt.Errorf("job %d: %w", id, err)
}

// Executions returns up to limit of the job's executions from index
// from on, in index order, only those in state when it is not "";
// ExecPending lists the targets not yet reached. next is the from of
// the following page, -1 on the last.
func (s *Service) Executions(ctx context.Context, appKey string, id int64, state string, from int64, limit int) (execs []store.Execution, next int64, err error) {
	j, err := s.store.GetJob(ctx, appKey, id)
	if err != nil {
		return nil, -1, jobErr(id, err)
	}
	if state != store.ExecPending {
		execs, err = s.store.JobExecutions(ctx, appKey, id, state, from, limit+1)
		if err != nil {
			return nil, -1, jobErr(id, err)
		}
	}
	if (state == "" || state == store.ExecPending) && len(execs) <= limit {
		// Targets at or past Next had no command when j was read; those
		// the runner reached since are among execs, read after j.
		start := max(from, j.Next)
		if len(execs) > 0 {
			start = max(start, execs[len(execs)-1].Index+1)
		}
		names, err := s.store.JobTargets(ctx, appKey, id, start, limit+1-len(execs))
		if err != nil {
			return nil, -1, jobErr(id, err)
		}
		for i, n := range names {
			execs = append(execs, store.Execution{Index: start + int64(i), DeviceName: n, State: store.ExecPending})
		}
	}
	next = -1
	if len(execs) > limit {
		next = execs[limit].Index
		execs = execs[:limit]
	}
	return execs, next, nil
}

// Pause stops a scheduled or running job from starting commands; those
// under way go on.
func (s *Service) Pause(ctx context.Context, appKey string, id int64) (store.Job, error) {
	return s.change(ctx, appKey, id, "pause", func(j *store.Job, now time.Time) error {
		if j.State != store.JobRunning && j.State != store.JobScheduled {
			return errdefs.Conflict("job", id, "is "+j.State+": only a scheduled or running job can be paused")
		}
		j.State = store.JobPaused
		return nil
	})
}

// Resume carries a paused job on: running, or scheduled while its
// start_at is ahead.
func (s *Service) Resume(ctx context.Context, appKey string, id int64) (store.Job, error) {
	return s.change(ctx, appKey, id, "resume", func(j *store.Job, now time.Time) error {
		if j.State != store.JobPaused {
			return errdefs.Conflict("job", id, "is "+j.State+": only a paused job can be resumed")
		}
		j.State = store.JobRunning
		if j.StartAt > now.Unix() {
			j.State = store.JobScheduled
		}
		return nil
	})
}

// Cancel ends a job that has not ended: no command is started any more,
// and those not yet sent are cancelled. An ended job is returned as it
// is.
func (s *Service) Cancel(ctx context.Context, appKey string, id int64) (store.Job, error) {
	return s.change(ctx, appKey, id, "cancel", func(j *store.Job, now time.Time) error {
		if !store.JobActive(j.State) {
			return errUnchanged
		}
		end(j, store.JobCancelled, "", now)
		return nil
	})
}

var errUnchanged = errors.New("job unchanged")

func (s *Service) change(ctx context.Context, appKey string, id int64, what string, fn func(*store.Job, time.Time) error) (store.Job, error) {
	var before store.Job
	j, err := s.store.UpdateJob(ctx, appKey, id, func(j *store.Job) error {
		before = *j
		return fn(j, s.now())
	})
	switch {
	case errors.Is(err, errUnchanged):
		return before, nil
	case err != nil:
		var c *errdefs.ConflictError
		if errors.As(err, &c) {
			return store.Job{}, err
		}
		return store.Job{}, fmt.Errorf("%s: %w", what, jobErr(id, err))
	}
	s.runner.Wake()
	return j, nil
}

// end ends j in state (done, cancelled or aborted) with reason, and
// emits job.done; an ended job that may have commands not yet sent is
// left to the runner to sweep.
func end(j *store.Job, state, reason string, now time.Time) {
	j.State, j.AbortReason, j.TimeDone = state, reason, now.UnixMilli()
	j.Swept = state == store.JobDone // nothing is queued once every execution ended
	data, _ := json.Marshal(struct {
		JobID       string           `json:"job_id"`
		State       string           `json:"state"`
		Counts      map[string]int64 `json:"counts"`
		AbortReason string           `json:"abort_reason"`
	}{strconv.FormatInt(j.ID, 10), state, j.Counts, reason})
	j.Emit = append(j.Emit, store.Event{Type: EventDone, AppKey: j.AppKey, Time: now.UnixMilli(), Data: data})
}
