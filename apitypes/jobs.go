package apitypes

import "encoding/json"

// JobTarget is a job's target: one tag, all devices, or a list of names.
type JobTarget struct {
	Tag         string   `json:"tag,omitempty"`
	All         bool     `json:"all,omitempty"`
	DeviceNames []string `json:"device_names,omitempty"`
}

// JobCommand is the command a job gives each target. A nil Timeout takes
// the command default.
type JobCommand struct {
	Name    string          `json:"name"`
	Params  json.RawMessage `json:"params,omitempty"`
	Timeout *int64          `json:"timeout,omitempty"`
}

// JobRamp is a rollout's exponential ramp.
type JobRamp struct {
	Start  int64   `json:"start"`
	Factor float64 `json:"factor"`
	Every  int64   `json:"every"`
}

// JobRollout paces a job. A nil Rate takes the default.
type JobRollout struct {
	Rate *int64   `json:"rate,omitempty"`
	Ramp *JobRamp `json:"ramp,omitempty"`
}

// JobAbort is one abort criterion.
type JobAbort struct {
	States  []string `json:"states"`
	Percent float64  `json:"percent"`
	MinDone int64    `json:"min_done"`
}

// JobRetries is how many new attempts an execution ended failed or
// timed out gets.
type JobRetries struct {
	Failed   int `json:"failed,omitempty"`
	TimedOut int `json:"timed_out,omitempty"`
}

// JobRequest is the body of POST /job/v1/jobs.
type JobRequest struct {
	SeqNo   int64       `json:"seq_no"`
	Target  JobTarget   `json:"target"`
	Command JobCommand  `json:"command"`
	TTL     *int64      `json:"ttl,omitempty"`
	StartAt *int64      `json:"start_at,omitempty"`
	Rollout *JobRollout `json:"rollout,omitempty"`
	Abort   []JobAbort  `json:"abort,omitempty"`
	Retries *JobRetries `json:"retries,omitempty"`
}

// JobCreated is the answer to POST /job/v1/jobs.
type JobCreated struct {
	JobID   int64 `json:"job_id"`
	Targets int64 `json:"targets"`
}

// JobRef is the body of POST /job/v1/job/pause, /resume and /cancel.
type JobRef struct {
	JobID int64 `json:"job_id"`
}

// Job is a job as the API shows it: GET /job/v1/job and the answer of
// pause, resume and cancel. Counts has every execution state with at
// least one execution, and "pending" always. Times are Unix ms, 0 until
// they happen.
type Job struct {
	JobID       int64            `json:"job_id"`
	State       string           `json:"state"`
	Targets     int64            `json:"targets"`
	Counts      map[string]int64 `json:"counts"`
	AbortReason string           `json:"abort_reason"`
	TimeCreate  int64            `json:"time_create"`
	TimeDone    int64            `json:"time_done"`
}

// JobExecution is one target of a job and its latest attempt.
type JobExecution struct {
	DeviceName string `json:"device_name"`
	CmdID      int64  `json:"cmd_id"`
	State      string `json:"state"`
	Code       int    `json:"code"`
	Attempt    int    `json:"attempt"`
	TimeDone   int64  `json:"time_done"`
}

// JobExecutions is the answer to GET /job/v1/job/executions. Next is
// the cursor of the following page, "" on the last.
type JobExecutions struct {
	Executions []JobExecution `json:"executions"`
	Next       string         `json:"next"`
}

// JobList is the answer to GET /job/v1/jobs: the app's scheduled,
// running and paused jobs, oldest first.
type JobList struct {
	Jobs []Job `json:"jobs"`
}
