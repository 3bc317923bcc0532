package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// Jobs (store.Jobs).
//
// Keys, in the app's slot:
//
//	{P a:<app>}:job:<id>          the job: hash of its JSON (def) and the
//	                              fields a step or an update moves (state,
//	                              step, next), which a transaction reads
//	                              without decoding JSON
//	{P a:<app>}:jt:<id>           its targets: a list of device names in
//	                              index order (LRANGE reads a page)
//	{P a:<app>}:jtn:<id>:<rand>   a long list of targets being staged by
//	                              CreateJob (expires unless renamed to jt)
//	{P a:<app>}:jx:<id>           its executions with a command: hash of
//	                              target index to Execution JSON
//	{P a:<app>}:jc:<id>           hash of state to how many of its
//	                              executions are in it (ExecPending is not
//	                              kept: it is Targets less the rest)
//	{P a:<app>}:ji:<id>           sorted set of the indexes in jx (score and
//	                              member the index), for JobExecutions
//	{P a:<app>}:js:<id>:<state>   the same for the executions in state
//
// and {P g}:jobs, the global index of jobs that may be Active (score the
// id, member "<id> <app>"), kept as {P g}:bcasts is for broadcasts.
//
// Every write of a job's command stores its execution in the same atomic
// write (commands.go): createCommandsScript, or the MULTI of
// UpdateCommand, runs noteExecs, which reads the execution as stored,
// moves the counts and state indexes from its state to the command's and
// stores the new execution. Reading the stored execution in that write
// makes the counts follow the executions exactly, whatever the callers
// believe the state before was.
// Target indexes are sorted-set scores: exact below 2^53.

func (s *Store) jobKey(app string, id int64) string        { return s.app(app) + "job:" + itoa(id) }
func (s *Store) jobTargetsKey(app string, id int64) string { return s.app(app) + "jt:" + itoa(id) }
func (s *Store) jobExecsKey(app string, id int64) string   { return s.app(app) + "jx:" + itoa(id) }
func (s *Store) jobCountsKey(app string, id int64) string  { return s.app(app) + "jc:" + itoa(id) }
func (s *Store) jobIndexKey(app string, id int64) string   { return s.app(app) + "ji:" + itoa(id) }
func (s *Store) jobStatePrefix(app string, id int64) string {
	return s.app(app) + "js:" + itoa(id) + ":"
}
func (s *Store) activeJobsKey() string { return s.global + ":jobs" }

// bulkLua's bulk calls cmd on key (none when false) with the arguments
// in list, items of per arguments each, a few hundred items per call, so
// that a batch costs a few calls instead of one per item and unpack stays
// within Lua's stack.
const bulkLua = `
local function bulk(cmd, key, list, per)
  local step = 500 * per
  for i = 1, #list, step do
    local j = math.min(i + step - 1, #list)
    if key then redis.call(cmd, key, unpack(list, i, j)) else redis.call(cmd, unpack(list, i, j)) end
  end
end
`

// noteExecsLua's noteExecs stores executions of the job whose keys are
// job, execs, counts and index, and whose state indexes' keys start with
// prefix: those whose four ARGV (target index, attempt, state, JSON)
// start at the indexes in starts, in that order. It reads the executions
// as stored, moves the counts and state indexes from their states to the
// new ones and stores the new ones, each unless the one it replaces is of
// a later attempt (a late write of an attempt a retry has replaced).
// Nothing is written for a job that does not exist. Returns how many it
// stored. Needs bulkLua. txNoteExecSrc is the same for one execution.
const noteExecsLua = `
local function noteExecs(job, execs, counts, index, prefix, starts)
  if #starts == 0 or redis.call('EXISTS', job) == 0 then return 0 end
  local idxs = {}
  for i, a in ipairs(starts) do idxs[i] = ARGV[a] end
  local stored = {}
  for i = 1, #idxs, 1000 do
    local vals = redis.call('HMGET', execs, unpack(idxs, i, math.min(i + 999, #idxs)))
    for k, v in ipairs(vals) do stored[i + k - 1] = v end
  end
  local orig, cur, final, order = {}, {}, {}, {}
  for i, a in ipairs(starts) do
    local idx = idxs[i]
    if cur[idx] == nil then
      local st, att = false, 0
      if stored[i] then
        local e = cjson.decode(stored[i])
        st, att = e.state, tonumber(e.attempt) or 0
      end
      orig[idx], cur[idx] = st, att
      order[#order + 1] = idx
    end
    local attempt = tonumber(ARGV[a + 1])
    if cur[idx] <= attempt then cur[idx], final[idx] = attempt, a end
  end
  local lists, names = {}, {}
  local function push(op, st, ...)
    local k = op .. st
    if lists[k] == nil then
      lists[k] = {}
      names[#names + 1] = {op, st, k}
    end
    for _, v in ipairs({...}) do table.insert(lists[k], v) end
  end
  local delta, zidx, hset = {}, {}, {}
  for _, idx in ipairs(order) do
    local a = final[idx]
    if a then
      local old, st = orig[idx], ARGV[a + 2]
      if old ~= st then
        if old then
          push('ZREM', old, idx)
          delta[old] = (delta[old] or 0) - 1
        end
        push('ZADD', st, idx, idx)
        delta[st] = (delta[st] or 0) + 1
      end
      zidx[#zidx + 1], zidx[#zidx + 2] = idx, idx
      hset[#hset + 1], hset[#hset + 2] = idx, ARGV[a + 3]
    end
  end
  for _, n in ipairs(names) do
    if n[1] == 'ZREM' then bulk('ZREM', prefix .. n[2], lists[n[3]], 1) else bulk('ZADD', prefix .. n[2], lists[n[3]], 2) end
  end
  bulk('ZADD', index, zidx, 2)
  bulk('HSET', execs, hset, 2)
  for _, n in ipairs(names) do
    local d = delta[n[2]]
    if d and d ~= 0 then
      redis.call('HINCRBY', counts, n[2], d)
      delta[n[2]] = 0
    end
  end
  return #hset / 2
end
`

// txNoteExecSrc stores one execution inside an optimistic transaction
// (EVAL in MULTI), whose WATCH already checked the fence: noteExecs for
// one execution, without its batching, which costs a single update twice
// the Redis time. The two must keep the same rules. KEYS: job,
// executions, counts, index. ARGV: state-index prefix, then the
// execution's index, attempt, state and JSON. Returns 1 if stored.
const txNoteExecSrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local idx, attempt, st = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cur = redis.call('HGET', KEYS[2], idx)
local old = nil
if cur then
  local e = cjson.decode(cur)
  if (tonumber(e.attempt) or 0) > attempt then return 0 end
  old = e.state
end
if old ~= st then
  if old then
    redis.call('ZREM', ARGV[1] .. old, idx)
    redis.call('HINCRBY', KEYS[3], old, -1)
  end
  redis.call('ZADD', ARGV[1] .. st, idx, idx)
  redis.call('HINCRBY', KEYS[3], st, 1)
end
redis.call('ZADD', KEYS[4], idx, idx)
redis.call('HSET', KEYS[2], idx, ARGV[5])
return 1
`

// putExecution queues on p, a MULTI, the write of the execution c stands
// for, if it is a job's command.
func (s *Store) putExecution(ctx context.Context, p goredis.Pipeliner, c store.Command) error {
	if c.Job == 0 {
		return nil
	}
	data, err := json.Marshal(store.ExecutionOf(c))
	if err != nil {
		return fmt.Errorf("encode execution of command %d: %w", c.ID, err)
	}
	app, id := c.AppKey, c.Job
	keys := []string{s.jobKey(app, id), s.jobExecsKey(app, id), s.jobCountsKey(app, id), s.jobIndexKey(app, id)}
	p.Eval(ctx, txNoteExecSrc, keys, s.jobStatePrefix(app, id), itoa(c.JobIndex), c.Attempt, c.State, data)
	return nil
}

// jobStep is the job step a command write makes (StartJob).
type jobStep struct {
	ID, Step, Next int64
}

// jobFields is j's hash as field and value pairs.
func jobFields(j store.Job) ([]any, error) {
	j.Counts, j.Emit = nil, nil
	def, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	return []any{"def", def, "state", j.State, "step", itoa(j.Step), "next", itoa(j.Next)}, nil
}

// decodeJob reads a job's hash and its counts; store.ErrNotFound if the
// hash is empty.
func decodeJob(h, counts map[string]string) (store.Job, error) {
	var j store.Job
	def, ok := h["def"]
	if !ok {
		return j, store.ErrNotFound
	}
	if err := json.Unmarshal([]byte(def), &j); err != nil {
		return j, fmt.Errorf("decode job: %w", err)
	}
	j.State = h["state"]
	var err error
	if j.Step, err = strconv.ParseInt(cmp.Or(h["step"], "0"), 10, 64); err != nil {
		return j, fmt.Errorf("decode job step: %w", err)
	}
	if j.Next, err = strconv.ParseInt(cmp.Or(h["next"], "0"), 10, 64); err != nil {
		return j, fmt.Errorf("decode job next: %w", err)
	}
	started := make(map[string]int64, len(counts))
	for st, v := range counts {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return j, fmt.Errorf("decode job count %s: %w", st, err)
		}
		started[st] = n
	}
	store.FillCounts(&j, started)
	return j, nil
}

func jobMember(app string, id int64) string { return itoa(id) + " " + app }

// createJobScript stores a new job's hash and its targets and records the
// seq_no. KEYS: seq_no entry, job, targets, staged targets. ARGV: has
// seq, entry JSON, entry expiry, staged, the number of hash arguments,
// the hash's field and value pairs, then the targets unless staged.
// Staged targets are renamed into place, or deleted when the job is
// refused. Returns -1 seq_no used, -4 exists, else 0.
var createJobScript = newScript(`
local staged = ARGV[4] == '1'
local refused = 0
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  refused = -1
elseif redis.call('EXISTS', KEYS[2]) == 1 then
  refused = -4
end
if refused ~= 0 then
  if staged then redis.call('DEL', KEYS[4]) end
  return refused
end
local nf = tonumber(ARGV[5])
redis.call('HSET', KEYS[2], unpack(ARGV, 6, 5 + nf))
redis.call('DEL', KEYS[3])
if staged then
  redis.call('RENAME', KEYS[4], KEYS[3])
  redis.call('PERSIST', KEYS[3])
else
  for i = 6 + nf, #ARGV, 1000 do
    redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) end
return 0
`)

// jobTargetsInline is the most targets CreateJob writes in its script;
// more are staged first, in commands of this many names, so that Redis
// serves other clients between them instead of running one script for
// seconds (a million targets take about two).
const jobTargetsInline = 10_000

// stageTargets pushes targets on to a new key of app's slot, which
// expires unless createJobScript renames it into place, and returns it.
func (s *Store) stageTargets(ctx context.Context, app string, id int64, targets []string) (string, error) {
	k := s.app(app) + "jtn:" + itoa(id) + ":" + strconv.FormatUint(rand.Uint64(), 16)
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := 0; i < len(targets); i += jobTargetsInline {
			chunk := targets[i:min(i+jobTargetsInline, len(targets))]
			names := make([]any, len(chunk))
			for n, t := range chunk {
				names[n] = t
			}
			p.RPush(ctx, k, names...)
			if i == 0 {
				p.Expire(ctx, k, time.Hour)
			}
		}
		return nil
	})
	return k, err
}

// CreateJob adds j to the global index of active jobs, then stores it
// with its targets and records seq in one script on the app's slot; a
// long list of targets is staged first (stageTargets).
func (s *Store) CreateJob(ctx context.Context, j store.Job, targets []string, seqNo int64, seq *store.SeqEntry) error {
	if int64(len(targets)) != j.Targets {
		return fmt.Errorf("create job %d: %d targets, job says %d", j.ID, len(targets), j.Targets)
	}
	has, data, pxat, err := seqArgs(seq)
	if err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	}
	fields, err := jobFields(j)
	if err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	}
	if j.Active() {
		if err := s.rdb.ZAdd(ctx, s.activeJobsKey(), goredis.Z{Score: float64(j.ID), Member: jobMember(j.AppKey, j.ID)}).Err(); err != nil {
			return fmt.Errorf("create job %d: %w", j.ID, err)
		}
	}
	staged := s.jobTargetsKey(j.AppKey, j.ID) // unused unless staging
	if len(targets) > jobTargetsInline {
		if staged, err = s.stageTargets(ctx, j.AppKey, j.ID, targets); err != nil {
			return fmt.Errorf("create job %d: %w", j.ID, err)
		}
	}
	keys := []string{s.seqKey(j.AppKey, seqNo), s.jobKey(j.AppKey, j.ID), s.jobTargetsKey(j.AppKey, j.ID), staged}
	args := make([]any, 0, 5+len(fields)+len(targets))
	args = append(append(args, has, data, pxat, boolArg(len(targets) > jobTargetsInline), len(fields)), fields...)
	if len(targets) <= jobTargetsInline {
		for _, t := range targets {
			args = append(args, t)
		}
	}
	res, err := s.run(ctx, createJobScript, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("create job %d: %w", j.ID, err)
	}
	switch res {
	case codeSeqUsed:
		// Not written: its index entry goes, unless a job of that id
		// exists after all, so that refused retries leave no entries
		// for ActiveJobs to read.
		if n, err := s.rdb.Exists(ctx, s.jobKey(j.AppKey, j.ID)).Result(); err == nil && n == 0 {
			s.rdb.ZRem(ctx, s.activeJobsKey(), jobMember(j.AppKey, j.ID))
		}
		return store.ErrSeqUsed
	case codeExists:
		return store.ErrAlreadyExists
	}
	return nil
}

// readJob queues on p the reads of the app's job and its counts.
func (s *Store) readJob(ctx context.Context, p goredis.Pipeliner, app string, id int64) (h, counts *goredis.MapStringStringCmd) {
	return p.HGetAll(ctx, s.jobKey(app, id)), p.HGetAll(ctx, s.jobCountsKey(app, id))
}

// GetJob reads the job and its counts in one MULTI: one moment of both.
func (s *Store) GetJob(ctx context.Context, appKey string, id int64) (store.Job, error) {
	var h, counts *goredis.MapStringStringCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		h, counts = s.readJob(ctx, p, appKey, id)
		return nil
	}); err != nil {
		return store.Job{}, fmt.Errorf("get job %d: %w", id, err)
	}
	return decodeJob(h.Val(), counts.Val())
}

// UpdateJob applies fn in an optimistic transaction on the job's hash, so
// a step or another update in between makes fn run again. The counts fn
// sees are read with the job but not watched: command writes move them
// all the time, and a job update does not depend on their last value.
func (s *Store) UpdateJob(ctx context.Context, appKey string, id int64, fn func(*store.Job) error) (store.Job, error) {
	k := s.jobKey(appKey, id)
	var out store.Job
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		var h, counts *goredis.MapStringStringCmd
		if _, err := tx.Pipelined(ctx, func(p goredis.Pipeliner) error {
			h, counts = s.readJob(ctx, p, appKey, id)
			return nil
		}); err != nil {
			return err
		}
		j, err := decodeJob(h.Val(), counts.Val())
		if err != nil {
			return err
		}
		// ApplyJobUpdate keeps an inactive job inactive (ended stays
		// ended, swept stays swept), so the global index, which ActiveJobs
		// prunes of inactive jobs, never needs the job back.
		evs, err := store.ApplyJobUpdate(&j, fn)
		if err != nil {
			return err
		}
		fields, err := jobFields(j)
		if err != nil {
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.HSet(ctx, k, fields[:4]...) // def and state: step and next are StartJob's
			s.txAppend(ctx, p, appKey, evs)
			return nil
		}); err != nil {
			return err
		}
		out = j
		return nil
	}, k)
	if err != nil {
		return store.Job{}, err
	}
	return out, nil
}

// StartJob stores the step's commands by the same script as
// CreateCommands, which also checks the job is running at step and moves
// its Step and Next.
func (s *Store) StartJob(ctx context.Context, appKey string, id, step, next int64, starts []store.JobStart) ([]store.Command, error) {
	cmds := make([]store.Command, len(starts))
	for i, st := range starts {
		cmds[i] = st.Command
	}
	out, err := s.createCommands(ctx, appKey, cmds, 0, nil, &jobStep{ID: id, Step: step, Next: next})
	if err != nil {
		return nil, fmt.Errorf("start job %d step %d: %w", id, step, err)
	}
	return out, nil
}

// JobTargets reads a range of the job's list of targets.
func (s *Store) JobTargets(ctx context.Context, appKey string, id, from int64, limit int) ([]string, error) {
	from = max(from, 0)
	var exists *goredis.IntCmd
	var names *goredis.StringSliceCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		exists = p.Exists(ctx, s.jobKey(appKey, id))
		if limit > 0 {
			names = p.LRange(ctx, s.jobTargetsKey(appKey, id), from, from+int64(limit)-1)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("targets of job %d: %w", id, err)
	}
	if exists.Val() == 0 {
		return nil, store.ErrNotFound
	}
	if names == nil {
		return []string{}, nil
	}
	return names.Val(), nil
}

// jobExecutionsScript reads up to ARGV[2] executions from the index
// ARGV[1] on, of the index KEYS[2] (all, or one state's). KEYS: job,
// index, executions. Returns {0} if there is no job, else 1 and the
// executions' JSON. Not fenced: it writes nothing.
var jobExecutionsScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local idx = redis.call('ZRANGE', KEYS[2], ARGV[1], '+inf', 'BYSCORE', 'LIMIT', 0, ARGV[2])
local out = {1}
for i = 1, #idx, 1000 do
  local vals = redis.call('HMGET', KEYS[3], unpack(idx, i, math.min(i + 999, #idx)))
  for _, v in ipairs(vals) do out[#out + 1] = v end
end
return out
`)

// JobExecutions reads a page of the job's index of executions (or of
// those in state) and the executions it names, in one script.
func (s *Store) JobExecutions(ctx context.Context, appKey string, id int64, state string, from int64, limit int) ([]store.Execution, error) {
	index := s.jobIndexKey(appKey, id)
	if state != "" {
		index = s.jobStatePrefix(appKey, id) + state
	}
	keys := []string{s.jobKey(appKey, id), index, s.jobExecsKey(appKey, id)}
	res, err := jobExecutionsScript.Run(ctx, s.rdb, keys, max(from, 0), max(limit, 0)).Slice()
	if err != nil {
		return nil, fmt.Errorf("executions of job %d: %w", id, err)
	}
	if len(res) == 0 || res[0] != int64(1) {
		return nil, store.ErrNotFound
	}
	out := make([]store.Execution, 0, len(res)-1)
	for _, v := range res[1:] {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var e store.Execution
		if err := json.Unmarshal([]byte(str), &e); err != nil {
			return nil, fmt.Errorf("decode execution of job %d: %w", id, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// ActiveJobs reads the global index and each job it names in one
// pipeline, dropping the entries of jobs no longer Active. An entry whose
// job is missing stays, as its creator may be about to write it.
func (s *Store) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	members, err := s.rdb.ZRange(ctx, s.activeJobsKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("active jobs: %w", err)
	}
	type entry struct {
		member    string
		h, counts *goredis.MapStringStringCmd
	}
	entries := make([]entry, 0, len(members))
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, mem := range members {
			idStr, app, ok := strings.Cut(mem, " ")
			id, err := strconv.ParseInt(idStr, 10, 64)
			if !ok || err != nil {
				continue
			}
			e := entry{member: mem}
			e.h, e.counts = s.readJob(ctx, p, app, id)
			entries = append(entries, e)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("active jobs: %w", err)
	}
	var out []store.Job
	var gone []any
	for _, e := range entries {
		j, err := decodeJob(e.h.Val(), e.counts.Val())
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, err
		case j.Active():
			out = append(out, j)
		default:
			gone = append(gone, e.member)
		}
	}
	if len(gone) > 0 {
		if err := s.rdb.ZRem(ctx, s.activeJobsKey(), gone...).Err(); err != nil {
			return nil, fmt.Errorf("active jobs: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b store.Job) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
