package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// Job states (docs/jobs.md). A job is active while scheduled, running
// or paused; done, cancelled and aborted are final.
const (
	JobScheduled = "scheduled"
	JobRunning   = "running"
	JobPaused    = "paused"
	JobDone      = "done"
	JobCancelled = "cancelled"
	JobAborted   = "aborted"
)

// ExecPending is the state of a job's execution that has no command
// yet: its target has not been reached.
const ExecPending = "pending"

// JobCommand is the command a job gives each of its targets.
type JobCommand struct {
	Name    string          `json:"name"`
	Params  json.RawMessage `json:"params,omitempty"`
	Timeout int64           `json:"timeout"`
}

// JobRamp is a job's optional exponential ramp: Start commands a
// minute at first, multiplied by Factor after every Every succeeded
// executions, up to the rollout's Rate.
type JobRamp struct {
	Start  int64   `json:"start"`
	Factor float64 `json:"factor"`
	Every  int64   `json:"every"`
}

// JobAbort is one abort criterion: once at least MinDone executions
// have ended, the job aborts when the share of them in States passes
// Percent.
type JobAbort struct {
	States  []string `json:"states"`
	Percent float64  `json:"percent"`
	MinDone int64    `json:"min_done"`
}

// Job is a command rolled out to a fleet. Times are Unix milliseconds,
// StartAt Unix seconds.
type Job struct {
	ID     int64  `json:"id"`
	AppKey string `json:"app_key"`
	State  string `json:"state"`
	// Tag and All say how the targets were chosen (informational; the
	// targets themselves are fixed at acceptance, see CreateJob).
	Tag string `json:"tag,omitempty"`
	All bool   `json:"all,omitempty"`
	// Targets is how many devices the job reaches.
	Targets int64      `json:"targets"`
	Command JobCommand `json:"command"`
	// TTL is each command's ttl (s).
	TTL     int64      `json:"ttl"`
	StartAt int64      `json:"start_at,omitempty"`
	Rate    int64      `json:"rate"`
	Ramp    *JobRamp   `json:"ramp,omitempty"`
	Abort   []JobAbort `json:"abort,omitempty"`
	// Retries is how many new attempts an execution ended in a state
	// (CmdFailed, CmdTimedOut) gets.
	Retries map[string]int `json:"retries,omitempty"`

	// Next is the index of the first target not yet given its first
	// attempt: every target before it has a command, none after it.
	Next int64 `json:"next"`
	// Step counts the StartJob writes made, so that two runners of one
	// job (a lease changing hands) cannot both make the same step.
	Step int64 `json:"step"`

	AbortReason string `json:"abort_reason,omitempty"`
	// Swept says the commands of an ended job that were not yet sent
	// are all cancelled.
	Swept      bool  `json:"swept,omitempty"`
	TimeCreate int64 `json:"time_create"`
	TimeDone   int64 `json:"time_done,omitempty"`

	// Counts is never stored by the caller: every read fills it with the
	// job's executions by state, ExecPending for the targets without a
	// command, and it always sums to Targets.
	Counts map[string]int64 `json:"-"`
	// Emit is never stored: events UpdateJob's fn sets are appended to
	// the event log in the same atomic write.
	Emit []Event `json:"-"`
}

// JobActive reports whether a job in state still has work to do.
func JobActive(state string) bool {
	return state == JobScheduled || state == JobRunning || state == JobPaused
}

// Active reports whether the job still has work: not ended, or ended
// and not yet swept.
func (j Job) Active() bool { return JobActive(j.State) || !j.Swept }

// Execution is one target of a job: its device and its latest attempt.
// Index is the target's place in the job (0 for the first); an
// execution without a command (CmdID 0, Attempt 0) is ExecPending.
type Execution struct {
	Index      int64  `json:"index"`
	DeviceName string `json:"device_name"`
	CmdID      int64  `json:"cmd_id"`
	State      string `json:"state"`
	Code       int    `json:"code,omitempty"`
	Attempt    int    `json:"attempt"`
	TimeDone   int64  `json:"time_done,omitempty"`
}

// ExecutionOf is the execution a job's command c stands for.
func ExecutionOf(c Command) Execution {
	return Execution{Index: c.JobIndex, DeviceName: c.DeviceName, CmdID: c.ID, State: c.State,
		Code: c.Code, Attempt: c.Attempt, TimeDone: c.TimeDone}
}

// JobStart is one command a job step starts: Command has Job, JobIndex
// and Attempt set, and Prev is the state its execution leaves:
// ExecPending for a first attempt, the last attempt's final state for a
// retry.
type JobStart struct {
	Command Command
	Prev    string
}

// FillCounts sets j.Counts from started, the job's executions with a
// command by state, adding ExecPending for the rest of its targets.
func FillCounts(j *Job, started map[string]int64) {
	j.Counts = make(map[string]int64, len(started)+1)
	var n int64
	for s, c := range started {
		if c != 0 && s != ExecPending {
			j.Counts[s] = c
			n += c
		}
	}
	j.Counts[ExecPending] = j.Targets - n
}

// Jobs is the part of the storage contract that keeps jobs and their
// executions (docs/jobs.md). A job's command is an ordinary command
// (Commands) with Job, JobIndex and Attempt set: every backend writes
// the execution it stands for (ExecutionOf) in the same atomic write as
// each write of the command, and keeps
// the job's Counts equal to its executions as stored. An execution is
// its target's latest attempt: a write of a command whose execution
// already stands for a later attempt (a late answer to an attempt
// retried since) leaves the execution and the counts as they are. Every write is
// durable when it returns, except as Commands allows for a lazy one.
type Jobs interface {
	// CreateJob stores a new job with its targets, the names of the
	// devices it reaches in index order (len(targets) must be
	// j.Targets), recording seq (when not nil), in one durable write;
	// ErrSeqUsed as CreateMessage, ErrAlreadyExists for a job id in use.
	CreateJob(ctx context.Context, j Job, targets []string, seqNo int64, seq *SeqEntry) error
	// GetJob returns the app's job, Counts filled, or ErrNotFound.
	GetJob(ctx context.Context, appKey string, id int64) (Job, error)
	// UpdateJob applies fn to the app's job and stores the result with
	// the events fn puts in Emit, atomically with respect to every other
	// write of the job, and returns it, Counts filled. The Counts fn
	// sees may lag behind command writes made meanwhile (they are not
	// held back for it); a later read catches up. fn must not change
	// ID, AppKey, Targets, Next or Step, and an ended job never becomes
	// active again. ErrNotFound if absent; an error from fn comes back
	// as is and nothing is written.
	UpdateJob(ctx context.Context, appKey string, id int64, fn func(*Job) error) (Job, error)
	// StartJob makes one step of the app's job id: it stores the
	// commands of starts as CreateCommands does (admission, events; each
	// with its execution), moves the job's Next to next and its Step to
	// step+1, all in one atomic, durable write, and returns the commands
	// as stored. ErrVersionConflict, nothing written, when the job is
	// not running or its Step is not step; ErrNotFound if absent.
	StartJob(ctx context.Context, appKey string, id, step, next int64, starts []JobStart) ([]Command, error)
	// JobTargets returns up to limit of the job's targets from index
	// from on, in index order; ErrNotFound if there is no such job.
	JobTargets(ctx context.Context, appKey string, id, from int64, limit int) ([]string, error)
	// JobExecutions returns up to limit of the job's executions that
	// have a command, from index from on, in index order; only those in
	// state when state is not ""; ErrNotFound if there is no such job.
	JobExecutions(ctx context.Context, appKey string, id int64, state string, from int64, limit int) ([]Execution, error)
	// ActiveJobs returns every app's Active jobs, oldest first, so that
	// a node taking over the runner finds them.
	ActiveJobs(ctx context.Context) ([]Job, error)
}

// ApplyJobUpdate runs an UpdateJob fn on j, the stored job read (Counts
// filled), and holds it to the contract: id, app, targets, Next and Step
// stay, an ended job never becomes active again, and a swept one is
// never unswept. It returns the
// events fn emitted, stamped with the job's app, and clears j.Emit.
func ApplyJobUpdate(j *Job, fn func(*Job) error) ([]Event, error) {
	was := *j
	j.Emit = nil
	if err := fn(j); err != nil {
		return nil, err
	}
	j.ID, j.AppKey, j.Targets, j.Next, j.Step, j.Counts = was.ID, was.AppKey, was.Targets, was.Next, was.Step, was.Counts
	if !JobActive(was.State) && JobActive(j.State) {
		return nil, fmt.Errorf("update job %d: an ended job cannot become active again", was.ID)
	}
	if was.Swept && !j.Swept {
		return nil, fmt.Errorf("update job %d: a swept job cannot be unswept", was.ID)
	}
	evs := Stamp(j.Emit, was.AppKey, "")
	j.Emit = nil
	return evs, nil
}
