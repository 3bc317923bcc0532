package pebble

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Executions and their counts.
//
// A job's execution (u/<app>\0<id><index> → encodeExec) is written in
// the batch of every write of the job's command that stands for it:
// CreateCommands (so StartJob) and UpdateCommand, lazy ones included.
// All writes of one index are of commands to the same device (the
// target's), so the device's stripe, which each holds across its
// commit, orders them: the execution a write replaces, read under the
// stripe, is the one stored.
//
// Counts by state are kept in memory (jobState): counted from the
// stored executions by the first read of the job after Open, then moved
// by each committed write from the state it replaced to the new one. A
// write holds its job's execs lock shared from before its commit until
// its counts are moved, and the count holds it exclusively, so the
// count never sees a write it will also be moved by.

// jobRef names a job.
type jobRef struct {
	app string
	id  int64
}

// jobState is what the store keeps in memory of one job.
type jobState struct {
	ref jobRef
	// mu serialises the writes of the job's record (CreateJob,
	// UpdateJob, StartJob); it is taken before any stripe.
	mu sync.Mutex
	// execs is held shared by each write of the job's executions across
	// its commit and count, exclusively while the counts are counted.
	execs sync.RWMutex
	// cmu guards loaded and counts.
	cmu    sync.Mutex
	loaded bool
	// counts are the job's stored executions by state (ExecPending
	// aside: FillCounts adds it).
	counts map[string]int64
}

// jobStates holds every job's jobState made since Open.
type jobStates struct {
	mu sync.Mutex
	m  map[jobRef]*jobState
}

// of returns the job's state, made on first use.
func (js *jobStates) of(app string, id int64) *jobState {
	js.mu.Lock()
	defer js.mu.Unlock()
	r := jobRef{app, id}
	st, ok := js.m[r]
	if !ok {
		if js.m == nil {
			js.m = map[jobRef]*jobState{}
		}
		st = &jobState{ref: r}
		js.m[r] = st
	}
	return st
}

func jobExecPrefix(app string, id int64) []byte {
	return binary.BigEndian.AppendUint64(key(pJobExec, app, ""), uint64(id))
}

func jobExecKey(app string, id, index int64) []byte {
	return binary.BigEndian.AppendUint64(jobExecPrefix(app, id), uint64(index))
}

// encodeExec encodes e but its index (the key's): the state first, so
// a count reads it alone, then the numbers, then the device name.
func encodeExec(e store.Execution) []byte {
	b := make([]byte, 0, 2+len(e.State)+4*binary.MaxVarintLen64+len(e.DeviceName))
	b = binary.AppendUvarint(b, uint64(len(e.State)))
	b = append(b, e.State...)
	b = binary.AppendVarint(b, e.CmdID)
	b = binary.AppendVarint(b, int64(e.Code))
	b = binary.AppendVarint(b, int64(e.Attempt))
	b = binary.AppendVarint(b, e.TimeDone)
	return append(b, e.DeviceName...)
}

var errBadExec = errors.New("malformed execution")

// execState reads the state of an encoded execution; v is used in
// place.
func execState(v []byte) ([]byte, []byte, error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return nil, nil, errBadExec
	}
	return v[w : w+int(n)], v[w+int(n):], nil
}

// decodeExec decodes the execution at index stored as v.
func decodeExec(index int64, v []byte) (store.Execution, error) {
	st, rest, err := execState(v)
	if err != nil {
		return store.Execution{}, err
	}
	e := store.Execution{Index: index, State: string(st)}
	var nums [4]int64
	for i := range nums {
		n, w := binary.Varint(rest)
		if w <= 0 {
			return store.Execution{}, errBadExec
		}
		nums[i], rest = n, rest[w:]
	}
	e.CmdID, e.Code, e.Attempt, e.TimeDone = nums[0], int(nums[1]), int(nums[2]), nums[3]
	e.DeviceName = string(rest)
	return e, nil
}

// execWrite is one execution a write stores: key, the state it
// replaces (ExecPending for none) and the new one, encoded.
type execWrite struct {
	st       *jobState
	key, raw []byte
	old, new string
	attempt  int
}

// execWrites are the executions one write of commands stores, with the
// jobs whose execs locks it holds shared.
type execWrites struct {
	w      []execWrite
	locked []*jobState
}

// prepareExecs finds the executions the job commands among cmds (all of
// appKey, stored as they are) stand for, and the states they replace,
// and takes their jobs' execs locks shared; release gives them back.
// The caller holds the stripes of the commands' devices. A target at or
// after the job's Next (step, when not nil: the job StartJob moves, as
// stored before it) has no execution yet; any other is read. A command
// of an earlier attempt than the stored execution's writes none.
func (s *Store) prepareExecs(appKey string, cmds []store.Command, step *jobStep) (*execWrites, error) {
	var ex execWrites
	if !slices.ContainsFunc(cmds, func(c store.Command) bool { return c.Job != 0 }) {
		return &ex, nil
	}
	seen := map[int64]*jobState{}
	at := map[string]int{} // where in ex.w each execution key is written
	for _, c := range cmds {
		if c.Job == 0 {
			continue
		}
		st := seen[c.Job]
		if st == nil {
			st = s.jobs.of(appKey, c.Job)
			seen[c.Job] = st
		}
		k := jobExecKey(appKey, c.Job, c.JobIndex)
		old := store.ExecPending
		if i, ok := at[string(k)]; ok {
			// Written twice in one batch: the later write counts from
			// the earlier (a first attempt ranks under a later).
			if ex.w[i].attempt > c.Attempt {
				continue
			}
			old = ex.w[i].new
		} else if step == nil || c.Job != step.job.ID || c.JobIndex < step.next {
			raw, err := s.get(k)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, fmt.Errorf("execution %d of job %d: %w", c.JobIndex, c.Job, err)
			default:
				e, err := decodeExec(c.JobIndex, raw)
				if err != nil {
					return nil, fmt.Errorf("execution %d of job %d: %w", c.JobIndex, c.Job, err)
				}
				if e.Attempt > c.Attempt {
					continue
				}
				old = e.State
			}
		}
		at[string(k)] = len(ex.w)
		ex.w = append(ex.w, execWrite{st: st, key: k, raw: encodeExec(store.ExecutionOf(c)), old: old, new: c.State, attempt: c.Attempt})
	}
	ex.locked = slices.SortedFunc(maps.Values(seen), func(a, b *jobState) int {
		return cmp.Or(cmp.Compare(a.ref.app, b.ref.app), cmp.Compare(a.ref.id, b.ref.id))
	})
	for _, st := range ex.locked {
		st.execs.RLock()
	}
	return &ex, nil
}

// put adds the executions to b.
func (ex *execWrites) put(b *pebble.Batch) error {
	for _, w := range ex.w {
		if err := set(b, w.key, w.raw); err != nil {
			return err
		}
	}
	return nil
}

// apply moves the counts by the executions, once committed.
func (ex *execWrites) apply() {
	var last *jobState
	for _, w := range ex.w {
		if w.old == w.new {
			continue
		}
		if w.st != last {
			if last != nil {
				last.cmu.Unlock()
			}
			last = w.st
			last.cmu.Lock()
		}
		if last.loaded {
			if w.old != store.ExecPending {
				last.counts[w.old]--
			}
			last.counts[w.new]++
		}
	}
	if last != nil {
		last.cmu.Unlock()
	}
}

// forget drops the counts of the jobs after a write whose outcome is
// unknown (its commit failed, perhaps after the batch was applied): the
// next read counts the executions again.
func (ex *execWrites) forget() {
	for _, st := range ex.locked {
		st.cmu.Lock()
		st.loaded, st.counts = false, nil
		st.cmu.Unlock()
	}
}

// release gives back the execs locks.
func (ex *execWrites) release() {
	for _, st := range ex.locked {
		st.execs.RUnlock()
	}
}

// jobCounts returns the job's stored executions by state, counting
// them on first use.
func (s *Store) jobCounts(st *jobState) (map[string]int64, error) {
	st.cmu.Lock()
	if st.loaded {
		defer st.cmu.Unlock()
		return maps.Clone(st.counts), nil
	}
	st.cmu.Unlock()
	st.execs.Lock()
	defer st.execs.Unlock()
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if !st.loaded {
		counts := map[string]int64{}
		p := jobExecPrefix(st.ref.app, st.ref.id)
		err := s.scan(p, prefixEnd(p), func(k, v []byte) (bool, error) {
			state, _, err := execState(v)
			if err != nil {
				return false, fmt.Errorf("count job %d: %q: %w", st.ref.id, k, err)
			}
			counts[string(state)]++
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		delete(counts, store.ExecPending)
		st.counts, st.loaded = counts, true
	}
	return maps.Clone(st.counts), nil
}
