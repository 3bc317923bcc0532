package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// Config paces the Runner.
type Config struct {
	// Poll is how often the runner looks at every active job: it bounds
	// how late a job accepted on another node starts, an abort is seen
	// and a paused job resumes (default 250 ms).
	Poll time.Duration
	// Step is the most commands one step starts, in one write (default
	// 1000).
	Step int
	// Busy reports whether single sends or commands are being made now:
	// while it does, the jobs together start at most YieldRate commands
	// a second, in steps of at most YieldStep spread over the second,
	// so that they never starve them.
	Busy func() bool
	// YieldStep is the most commands a step starts while Busy (default
	// 100).
	YieldStep int
	// YieldRate is the most commands a second the jobs start while Busy
	// (default 2000, the pace broadcasts give way at).
	YieldRate int
	// SweepStep is the most commands of ended jobs the runner cancels a
	// poll, all jobs together (default 1000): an ended job with many
	// commands queued for offline devices is swept over several polls,
	// so that the other jobs, of every app, go on meanwhile.
	SweepStep int
}

func (c *Config) fill() {
	if c.Poll <= 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.Step <= 0 {
		c.Step = 1000
	}
	if c.YieldStep <= 0 {
		c.YieldStep = 100
	}
	if c.YieldRate <= 0 {
		c.YieldRate = 2000
	}
	if c.SweepStep <= 0 {
		c.SweepStep = 1000
	}
	if c.Busy == nil {
		c.Busy = func() bool { return false }
	}
}

// Runner carries out the active jobs of every app: it starts scheduled
// jobs on time, starts commands at each job's pace, retries, aborts,
// ends jobs and cancels the commands an ended job had not yet sent. On
// a cluster, one node runs it at a time (a lease); a step another
// runner made meanwhile is refused by the store, so none is made twice.
type Runner struct {
	store Store
	cmds  Commands
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	wake  chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	// paces, retryScans and sweepLeft live in the run goroutine only.
	paces      map[int64]*pace
	retryScans map[int64]map[string]int64
	// yield is the jobs' allowance while Busy, and yielded says that a
	// job of the last Tick had commands to start that it held back:
	// the run goroutine's too.
	yield   pace
	yielded bool
	// sweepLeft is how many commands sweeps may still cancel this poll.
	sweepLeft int
}

// NewRunner returns a Runner of the jobs in st, starting their commands
// through cmds.
func NewRunner(st Store, cmds Commands, cfg Config, log *slog.Logger) *Runner {
	cfg.fill()
	return &Runner{store: st, cmds: cmds, cfg: cfg, log: log, now: time.Now, wake: make(chan struct{}, 1)}
}

// SetClock has r take the time from now; for tests.
func (r *Runner) SetClock(now func() time.Time) { r.now = now }

// Wake has the runner look at the jobs now rather than at its next poll.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the runner until Stop.
func (r *Runner) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(ctx, r.done)
	return nil
}

// Stop stops the runner and waits for its step under way.
func (r *Runner) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (r *Runner) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	r.paces, r.retryScans = map[int64]*pace{}, map[int64]map[string]int64{}
	t := time.NewTicker(r.cfg.Poll)
	defer t.Stop()
	for {
		r.Tick(ctx)
		// While giving way, the next step comes as soon as the yield
		// pace allows one, not a poll later.
		var soon <-chan time.Time
		if r.yielded {
			soon = time.After(time.Duration(float64(time.Second) * float64(r.cfg.YieldStep) / float64(r.cfg.YieldRate)))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-soon:
		case <-r.wake:
		}
	}
}

// Tick looks at every active job once: what run does each poll.
func (r *Runner) Tick(ctx context.Context) {
	if r.paces == nil {
		r.paces, r.retryScans = map[int64]*pace{}, map[int64]map[string]int64{}
	}
	r.yielded = false
	jobs, err := r.store.ActiveJobs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("jobs: list active jobs", "err", err)
		}
		return
	}
	r.sweepLeft = r.cfg.SweepStep
	live := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		live[j.ID] = true
		if err := r.job(ctx, j); err != nil && ctx.Err() == nil {
			r.log.Error("jobs: run job", "app", j.AppKey, "job", j.ID, "err", err)
		}
	}
	for id := range r.paces {
		if !live[id] {
			delete(r.paces, id)
			delete(r.retryScans, id)
		}
	}
	if r.sweepLeft <= 0 {
		// A sweep stopped at its bound: the next poll carries it on at
		// once rather than a Poll later, every job getting its look.
		r.Wake()
	}
}

// job carries j one poll on.
func (r *Runner) job(ctx context.Context, j store.Job) error {
	now := r.now()
	switch {
	case !store.JobActive(j.State):
		return r.sweep(ctx, j)
	case j.State == store.JobScheduled && now.Unix() >= j.StartAt:
		_, err := r.update(ctx, j, func(j *store.Job) error {
			if j.State != store.JobScheduled {
				return errUnchanged
			}
			j.State = store.JobRunning
			return nil
		})
		return err
	case j.State != store.JobRunning:
		return nil
	}
	if reason := abortReason(j); reason != "" {
		return r.finish(ctx, j, store.JobAborted, reason)
	}
	retries, err := r.retries(ctx, j)
	if err != nil {
		return err
	}
	if j.Next >= j.Targets && open(j) == 0 && len(retries) == 0 {
		return r.finish(ctx, j, store.JobDone, "")
	}
	n, busy := r.allowance(j, now)
	step := stepSize(j, r.cfg.Step)
	for n > 0 && ctx.Err() == nil {
		var ts []command.JobTarget
		if len(retries) > 0 {
			k := min(n, step, len(retries))
			ts, retries = retries[:k], retries[k:]
		}
		next := j.Next
		if k := min(n, step) - len(ts); k > 0 && j.Next < j.Targets {
			names, err := r.store.JobTargets(ctx, j.AppKey, j.ID, j.Next, k)
			if err != nil {
				return fmt.Errorf("read targets: %w", err)
			}
			for i, name := range names {
				ts = append(ts, command.JobTarget{DeviceName: name, Index: j.Next + int64(i), Attempt: 1})
			}
			next += int64(len(names))
		}
		if len(ts) == 0 {
			return nil
		}
		if _, err := r.cmds.StartJob(ctx, j, next, ts); err != nil {
			if errors.Is(err, store.ErrVersionConflict) {
				return nil // moved on meanwhile (paused, cancelled, another runner): the next poll rereads it
			}
			return fmt.Errorf("start commands: %w", err)
		}
		r.paces[j.ID].took(len(ts))
		if busy {
			r.yield.took(len(ts))
		}
		n -= len(ts)
		j.Next, j.Step = next, j.Step+1
	}
	return nil
}

// stepBytes bounds the params one step stores: each command keeps its
// own copy, so a step of 1000 commands with 256 KiB params would be a
// write of 250 MiB held in memory at once.
const stepBytes = 4 << 20

// stepSize is how many commands one step of j starts: at most limit,
// and no more than stepBytes of params (at least one).
func stepSize(j store.Job, limit int) int {
	return max(1, min(limit, stepBytes/max(1, len(j.Command.Params))))
}

// open counts j's executions under way.
func open(j store.Job) int64 {
	var n int64
	for _, s := range openStates {
		n += j.Counts[s]
	}
	return n
}

// abortReason is why j must abort now, "" if it need not: the first of
// its rules whose share of ended executions in its states passes its
// percent, among at least its min_done ended executions.
func abortReason(j store.Job) string {
	var ended int64
	for _, s := range finalStates {
		ended += j.Counts[s]
	}
	if ended == 0 {
		return ""
	}
	for _, a := range j.Abort {
		if ended < a.MinDone {
			continue
		}
		var bad int64
		for _, s := range a.States {
			bad += j.Counts[s]
		}
		share := 100 * float64(bad) / float64(ended)
		if share > a.Percent {
			return fmt.Sprintf("%s: %d of %d ended executions (%.2f%%), more than %v%%",
				strings.Join(a.States, " or "), bad, ended, share, a.Percent)
		}
	}
	return ""
}

// retries lists the executions of j that end in a retry state with
// attempts left. A state's executions are read again only when its
// count moved since a read that found none to retry.
func (r *Runner) retries(ctx context.Context, j store.Job) ([]command.JobTarget, error) {
	var out []command.JobTarget
	for _, st := range RetryStates {
		max := j.Retries[st]
		if max == 0 || j.Counts[st] == 0 {
			continue
		}
		seen := r.retryScans[j.ID]
		if seen != nil && seen[st] == j.Counts[st] {
			continue
		}
		found := 0
		for from := int64(0); ; {
			es, err := r.store.JobExecutions(ctx, j.AppKey, j.ID, st, from, 1000)
			if err != nil {
				return nil, fmt.Errorf("read %s executions: %w", st, err)
			}
			for _, e := range es {
				if e.Attempt <= max {
					out = append(out, command.JobTarget{DeviceName: e.DeviceName, Index: e.Index, Attempt: e.Attempt + 1})
					found++
				}
			}
			if len(es) < 1000 {
				break
			}
			from = es[len(es)-1].Index + 1
		}
		if seen == nil {
			seen = map[string]int64{}
			r.retryScans[j.ID] = seen
		}
		if found == 0 {
			seen[st] = j.Counts[st]
		} else {
			delete(seen, st)
		}
	}
	return out, nil
}

// finish ends j in state with reason, emitting job.done, and sweeps it.
func (r *Runner) finish(ctx context.Context, j store.Job, state, reason string) error {
	j, err := r.update(ctx, j, func(j *store.Job) error {
		if j.State != store.JobRunning {
			return errUnchanged
		}
		end(j, state, reason, r.now())
		return nil
	})
	if err != nil || j.Swept {
		return err
	}
	return r.sweep(ctx, j)
}

// sweep cancels the commands an ended job had not yet sent, then marks
// it swept. It cancels at most what is left of the poll's SweepStep and
// leaves the rest to the next polls (the job stays active until swept).
// A crash midway sweeps again: commands already ended are left as they
// are.
func (r *Runner) sweep(ctx context.Context, j store.Job) error {
	for {
		limit := min(r.sweepLeft, 1000)
		if limit <= 0 {
			return nil
		}
		es, err := r.store.JobExecutions(ctx, j.AppKey, j.ID, store.CmdQueued, 0, limit)
		if err != nil {
			return fmt.Errorf("read queued executions: %w", err)
		}
		for _, e := range es {
			r.sweepLeft--
			if _, err := r.cmds.Cancel(ctx, j.AppKey, e.CmdID); err != nil {
				return fmt.Errorf("cancel command %d: %w", e.CmdID, err)
			}
		}
		if len(es) < limit {
			break
		}
	}
	_, err := r.update(ctx, j, func(j *store.Job) error {
		j.Swept = true
		return nil
	})
	return err
}

// update applies fn to j in the store; errUnchanged writes nothing.
func (r *Runner) update(ctx context.Context, j store.Job, fn func(*store.Job) error) (store.Job, error) {
	out, err := r.store.UpdateJob(ctx, j.AppKey, j.ID, fn)
	if errors.Is(err, errUnchanged) {
		return j, nil
	}
	return out, err
}

// pace is a job's allowance of commands: it grows continuously at the
// job's rate (with its ramp), and holds at most a second's worth, or one
// command for a rate under 60 a minute.
type pace struct {
	tokens float64
	last   time.Time
}

// pace returns how many commands j may start now.
func (r *Runner) pace(j store.Job, now time.Time) int {
	p := r.paces[j.ID]
	rate := float64(currentRate(j)) / 60 // a second
	if p == nil {
		p = &pace{tokens: 1, last: now}
		r.paces[j.ID] = p
	}
	p.tokens = math.Min(p.tokens+now.Sub(p.last).Seconds()*rate, math.Max(1, rate))
	p.last = now
	return int(p.tokens)
}

func (p *pace) took(n int) { p.tokens -= float64(n) }

// allowance is how many commands j may start now: its pace's and, while
// Busy, no more than the yield pace has left (busy says it applies).
func (r *Runner) allowance(j store.Job, now time.Time) (n int, busy bool) {
	n = r.pace(j, now)
	if !r.cfg.Busy() {
		return n, false
	}
	y := &r.yield
	y.tokens = math.Min(y.tokens+now.Sub(y.last).Seconds()*float64(r.cfg.YieldRate), float64(r.cfg.YieldStep))
	y.last = now
	if int(y.tokens) < n && j.Next < j.Targets {
		r.yielded = true
	}
	return min(n, int(y.tokens)), true
}

// currentRate is j's rate a minute now: its ramp's start multiplied by
// the factor once for every `every` succeeded executions, up to the
// rollout's rate.
func currentRate(j store.Job) int64 {
	if j.Ramp == nil {
		return j.Rate
	}
	steps := float64(j.Counts[store.CmdSucceeded] / max(1, j.Ramp.Every))
	r := float64(j.Ramp.Start) * math.Pow(j.Ramp.Factor, steps)
	if r >= float64(j.Rate) || math.IsInf(r, 1) {
		return j.Rate
	}
	return int64(r)
}
