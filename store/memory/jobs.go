package memory

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/devmsg/devmsg/store"
)

// memJob is a job with its targets, its executions that have a command
// (by target index) and their counts by state.
type memJob struct {
	job     store.Job
	targets []string
	execs   map[int64]store.Execution
	counts  map[string]int64
}

// view returns the job as a read shows it, Counts filled.
func (m *memJob) view() (store.Job, error) {
	j, err := clone(m.job)
	if err != nil {
		return j, err
	}
	store.FillCounts(&j, m.counts)
	return j, nil
}

// CreateJob stores a new job with its targets; see store.Jobs.
func (s *Store) CreateJob(ctx context.Context, j store.Job, targets []string, seqNo int64, seq *store.SeqEntry) error {
	if int64(len(targets)) != j.Targets {
		return fmt.Errorf("create job %d: %d targets, job says %d", j.ID, len(targets), j.Targets)
	}
	c, err := clone(j)
	if err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	}
	c.Counts, c.Emit = nil, nil
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.seqUsed(j.AppKey, seqNo, seq) {
		return store.ErrSeqUsed
	}
	k := bcKey{j.AppKey, j.ID}
	if _, ok := s.jobs[k]; ok {
		return store.ErrAlreadyExists
	}
	s.jobs[k] = &memJob{job: c, targets: slices.Clone(targets), execs: map[int64]store.Execution{}, counts: map[string]int64{}}
	s.putSeq(j.AppKey, seqNo, seq)
	return nil
}

// GetJob returns the app's job; see store.Jobs.
func (s *Store) GetJob(ctx context.Context, appKey string, id int64) (store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.mu.Unlock()
	m, ok := s.jobs[bcKey{appKey, id}]
	if !ok {
		return store.Job{}, store.ErrNotFound
	}
	return m.view()
}

// UpdateJob applies fn to the app's job; see store.Jobs.
func (s *Store) UpdateJob(ctx context.Context, appKey string, id int64, fn func(*store.Job) error) (store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.mu.Unlock()
	m, ok := s.jobs[bcKey{appKey, id}]
	if !ok {
		return store.Job{}, store.ErrNotFound
	}
	j, err := m.view()
	if err != nil {
		return j, err
	}
	evs, err := store.ApplyJobUpdate(&j, fn)
	if err != nil {
		return store.Job{}, err
	}
	stored, err := clone(j)
	if err != nil {
		return store.Job{}, fmt.Errorf("update job %d: %w", id, err)
	}
	stored.Counts = nil
	m.job = stored
	s.appendLocked(evs)
	return j, nil
}

// StartJob makes one step of the app's job; see store.Jobs.
func (s *Store) StartJob(ctx context.Context, appKey string, id, step, next int64, starts []store.JobStart) ([]store.Command, error) {
	cmds := make([]store.Command, len(starts))
	for i, st := range starts {
		cmds[i] = st.Command
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	m, ok := s.jobs[bcKey{appKey, id}]
	if !ok {
		return nil, store.ErrNotFound
	}
	if m.job.State != store.JobRunning || m.job.Step != step {
		return nil, store.ErrVersionConflict
	}
	out, err := s.createCommandsLocked(appKey, cmds)
	if err != nil {
		return nil, err
	}
	m.job.Step, m.job.Next = step+1, next
	return out, nil
}

// noteJobCommand writes the execution job command c stands for and
// moves the job's counts from the execution's state before to c's,
// unless the execution stands for a later attempt (see store.Jobs).
// Call with s.mu held.
func (s *Store) noteJobCommand(c store.Command) {
	if c.Job == 0 {
		return
	}
	m, ok := s.jobs[bcKey{c.AppKey, c.Job}]
	if !ok {
		return
	}
	if e, ok := m.execs[c.JobIndex]; ok {
		if e.Attempt > c.Attempt {
			return
		}
		m.counts[e.State]--
	}
	m.counts[c.State]++
	m.execs[c.JobIndex] = store.ExecutionOf(c)
}

// JobTargets returns the job's targets from index from; see store.Jobs.
func (s *Store) JobTargets(ctx context.Context, appKey string, id, from int64, limit int) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	m, ok := s.jobs[bcKey{appKey, id}]
	if !ok {
		return nil, store.ErrNotFound
	}
	from = min(max(from, 0), int64(len(m.targets)))
	end := min(from+int64(limit), int64(len(m.targets)))
	return slices.Clone(m.targets[from:end]), nil
}

// JobExecutions returns the job's executions with a command; see
// store.Jobs.
func (s *Store) JobExecutions(ctx context.Context, appKey string, id int64, state string, from int64, limit int) ([]store.Execution, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	m, ok := s.jobs[bcKey{appKey, id}]
	if !ok {
		return nil, store.ErrNotFound
	}
	var out []store.Execution
	for _, e := range m.execs {
		if e.Index >= from && (state == "" || e.State == state) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out[:min(len(out), limit)], nil
}

// ActiveJobs returns every app's active jobs, oldest first.
func (s *Store) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Job
	for _, m := range s.jobs {
		if m.job.Active() {
			j, err := m.view()
			if err != nil {
				return nil, err
			}
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}
