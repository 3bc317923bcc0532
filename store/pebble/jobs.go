package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Job keys. Executions (u/) are in jobexecs.go.
const (
	// j/<app>\0<id> → Job (JSON; Counts and Emit are never stored).
	pJob = "j/"
	// f/<id><app> → empty: the active jobs (store.Job.Active), oldest
	// first, so ActiveJobs reads no other job.
	pActiveJob = "f/"
	// y/<app>\0<id><index> → the name of the job's target at index, so
	// JobTargets is one range read.
	pJobTarget = "y/"
	// u/<app>\0<id><index> → the job's execution at index.
	pJobExec = "u/"
)

func jobKey(app string, id int64) []byte { return broadcastKeyIn(pJob, app, id) }

func activeJobKey(app string, id int64) []byte {
	return append(binary.BigEndian.AppendUint64([]byte(pActiveJob), uint64(id)), app...)
}

func jobTargetPrefix(app string, id int64) []byte { return broadcastKeyIn(pJobTarget, app, id) }

func jobTargetKey(app string, id, index int64) []byte {
	return binary.BigEndian.AppendUint64(jobTargetPrefix(app, id), uint64(index))
}

// putJob adds j and its place in the active index to b.
func putJob(b *pebble.Batch, j store.Job) error {
	j.Counts, j.Emit = nil, nil
	if err := setJSON(b, jobKey(j.AppKey, j.ID), j); err != nil {
		return err
	}
	if j.Active() {
		return set(b, activeJobKey(j.AppKey, j.ID), nil)
	}
	return b.Delete(activeJobKey(j.AppKey, j.ID), nil)
}

// readJob reads the app's job, Counts filled. Its jobState is made
// only for a job found, so reads of missing jobs leave none behind.
func (s *Store) readJob(appKey string, id int64) (store.Job, error) {
	var j store.Job
	if err := s.getJSON(jobKey(appKey, id), &j); err != nil {
		return store.Job{}, err
	}
	counts, err := s.jobCounts(s.jobs.of(appKey, id))
	if err != nil {
		return store.Job{}, err
	}
	store.FillCounts(&j, counts)
	return j, nil
}

// CreateJob stores the job, its targets and seq in one synced batch;
// see store.Jobs.
func (s *Store) CreateJob(ctx context.Context, j store.Job, targets []string, seqNo int64, seq *store.SeqEntry) error {
	if int64(len(targets)) != j.Targets {
		return fmt.Errorf("create job %d: %d targets, job says %d", j.ID, len(targets), j.Targets)
	}
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	st := s.jobs.of(j.AppKey, j.ID)
	st.mu.Lock()
	defer st.mu.Unlock()
	if seq != nil {
		defer s.lock2(seqStripe(j.AppKey, seqNo), seqStripe(j.AppKey, seqNo))()
		if err := s.checkSeqFree(j.AppKey, seqNo, seq); err != nil {
			return err
		}
	}
	if found, err := s.exists(jobKey(j.AppKey, j.ID)); err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	} else if found {
		return store.ErrAlreadyExists
	}
	err := s.write(func(b *pebble.Batch) error {
		if err := putJob(b, j); err != nil {
			return err
		}
		prefix := jobTargetPrefix(j.AppKey, j.ID)
		k := make([]byte, 0, len(prefix)+8)
		for i, name := range targets {
			// Set copies the key: one buffer serves every target.
			k = binary.BigEndian.AppendUint64(append(k[:0], prefix...), uint64(i))
			if err := set(b, k, []byte(name)); err != nil {
				return err
			}
		}
		return putSeq(b, j.AppKey, seqNo, seq)
	})
	if err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	}
	return nil
}

// GetJob returns the app's job; see store.Jobs.
func (s *Store) GetJob(ctx context.Context, appKey string, id int64) (store.Job, error) {
	if err := s.enter(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.exit()
	return s.readJob(appKey, id)
}

// UpdateJob applies fn to the app's job under its lock and stores it
// with fn's events in one synced batch; see store.Jobs.
func (s *Store) UpdateJob(ctx context.Context, appKey string, id int64, fn func(*store.Job) error) (store.Job, error) {
	if err := s.enter(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.exit()
	st := s.jobs.of(appKey, id)
	st.mu.Lock()
	defer st.mu.Unlock()
	j, err := s.readJob(appKey, id)
	if err != nil {
		return store.Job{}, err
	}
	evs, err := store.ApplyJobUpdate(&j, fn)
	if err != nil {
		return store.Job{}, err
	}
	err = s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) { return evs, putJob(b, j) })
	if err != nil {
		return store.Job{}, fmt.Errorf("update job %d: %w", id, err)
	}
	return j, nil
}

// jobStep is what a StartJob adds to the write of its commands: the job
// as the step leaves it, and its Next before the step.
type jobStep struct {
	job  store.Job
	next int64
}

// StartJob makes one step of the app's job: under the job's lock it
// checks the step and writes the commands (CreateCommands' admission
// and write), their executions and the job in one synced batch; see
// store.Jobs.
func (s *Store) StartJob(ctx context.Context, appKey string, id, step, next int64, starts []store.JobStart) ([]store.Command, error) {
	if err := s.enterWrite(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	st := s.jobs.of(appKey, id)
	st.mu.Lock()
	defer st.mu.Unlock()
	var j store.Job
	if err := s.getJSON(jobKey(appKey, id), &j); err != nil {
		return nil, err
	}
	if j.State != store.JobRunning || j.Step != step {
		return nil, store.ErrVersionConflict
	}
	cmds := make([]store.Command, len(starts))
	for i, start := range starts {
		if start.Command.Job != id {
			return nil, fmt.Errorf("start job %d: command %d is of job %d", id, start.Command.ID, start.Command.Job)
		}
		cmds[i] = start.Command
	}
	js := &jobStep{job: j, next: j.Next}
	js.job.Next, js.job.Step = next, step+1
	out, err := s.createCommands(appKey, cmds, 0, nil, js)
	if err != nil {
		return nil, fmt.Errorf("start job %d: %w", id, err)
	}
	return out, nil
}

// jobExists reports store.ErrNotFound when the app has no job id.
func (s *Store) jobExists(appKey string, id int64) error {
	found, err := s.exists(jobKey(appKey, id))
	if err == nil && !found {
		err = store.ErrNotFound
	}
	return err
}

// JobTargets reads the job's targets from index from on; see
// store.Jobs.
func (s *Store) JobTargets(ctx context.Context, appKey string, id, from int64, limit int) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := s.jobExists(appKey, id); err != nil {
		return nil, err
	}
	out := []string{}
	if limit <= 0 {
		return out, nil
	}
	p := jobTargetPrefix(appKey, id)
	err := s.scan(jobTargetKey(appKey, id, max(from, 0)), prefixEnd(p), func(_, v []byte) (bool, error) {
		out = append(out, string(v))
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("targets of job %d: %w", id, err)
	}
	return out, nil
}

// JobExecutions scans the job's executions from index from on; see
// store.Jobs.
func (s *Store) JobExecutions(ctx context.Context, appKey string, id int64, state string, from int64, limit int) ([]store.Execution, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := s.jobExists(appKey, id); err != nil {
		return nil, err
	}
	var out []store.Execution
	if limit <= 0 {
		return out, nil
	}
	p := jobExecPrefix(appKey, id)
	err := s.scan(jobExecKey(appKey, id, max(from, 0)), prefixEnd(p), func(k, v []byte) (bool, error) {
		if state != "" {
			if st, _, err := execState(v); err != nil || string(st) != state {
				return true, err
			}
		}
		e, err := decodeExec(int64(binary.BigEndian.Uint64(k[len(p):])), v)
		if err != nil {
			return false, err
		}
		out = append(out, e)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("executions of job %d: %w", id, err)
	}
	return out, nil
}

// ActiveJobs reads the active index and the jobs it names.
func (s *Store) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var refs []jobRef
	prefix := []byte(pActiveJob)
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		if len(k) < len(prefix)+8 {
			return false, fmt.Errorf("active jobs: malformed key %q", k)
		}
		refs = append(refs, jobRef{string(k[len(prefix)+8:]), int64(binary.BigEndian.Uint64(k[len(prefix):]))})
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("active jobs: %w", err)
	}
	out := make([]store.Job, 0, len(refs))
	for _, r := range refs {
		j, err := s.readJob(r.app, r.id)
		if err != nil {
			return nil, fmt.Errorf("active jobs: %w", err)
		}
		if j.Active() {
			out = append(out, j)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Job) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
