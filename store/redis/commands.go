package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// Device commands.
//
// Keys, in the app's slot: {P a:<app>}:c:<id> the Command JSON;
// {P a:<app>}:co:<device> the device's open commands (sorted set, score
// 0, member idMember, so byte order is id order); {P a:<app>}:cdue the
// app's open commands scored by when they are due (store.Command.Due, Unix
// ms, exact in a double). Global: {P g}:cmdapps, the apps that have had
// commands, which DueCommands reads, and {P g}:maxid, raised to every
// command id before its write as for messages (ids of both come from one
// generator). CreateCommands is a compare-and-set script of the devices
// as admission read them (createCommandsScript); UpdateCommand an
// optimistic transaction on the command. Each write appends the events
// it emits and, for a job's command, stores its execution in the same
// script or MULTI (jobs.go).

func (s *Store) cmdKey(app string, id int64) string   { return s.app(app) + "c:" + itoa(id) }
func (s *Store) cmdOpenKey(app, device string) string { return s.app(app) + "co:" + device }
func (s *Store) cmdDueKey(app string) string          { return s.app(app) + "cdue" }
func (s *Store) cmdAppsKey() string                   { return s.global + ":cmdapps" }

// raiseScript raises KEYS[1] to ARGV[1] and adds ARGV[2] to the set KEYS[2].
var raiseScript = goredis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('SADD', KEYS[2], ARGV[2])
return 1`)

// CreateCommands stores cmds with seq in one transaction; see
// store.Commands.
func (s *Store) CreateCommands(ctx context.Context, appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq) ([]store.Command, error) {
	out, err := s.createCommands(ctx, appKey, cmds, seqNo, seq, nil)
	if err != nil {
		return nil, fmt.Errorf("create commands: %w", err)
	}
	return out, nil
}

// createCommandsScript stores a batch of commands of one app, each with
// its events and, for a job's command, its execution (noteExecs), after
// checking what the caller admitted them against: a compare-and-set of
// each queued command's device as read (exists, open count), so that
// admission (store.AdmitCommand) stays in Go and a concurrent change
// sends the caller back to read again. With a job step it also checks the
// job is running at the step and moves its step and next.
// Returns -1 seq_no used, -2 no job, -3 job not at the step, -5 a device
// changed since it was read, else 0.
//
// KEYS: seq_no entry, due index, event stream, event last id, job (the
// step's), then device and open set of each device, then each command,
// then job, executions, counts and index of each job with commands.
// ARGV: has seq, entry JSON, entry expiry, has step, step, step+1, next,
// event channel, app, device count, command count, job count, event
// count, store.JobRunning; then per device: checked, exists, open count;
// per command: member, device number, open, due, JSON, job number (0 for
// none), and its execution's index, attempt, state and JSON; per job: its
// state-index key prefix; then the events.
var createCommandsScript = newScript(appendEventsLua + bulkLua + noteExecsLua + `
local ndev, ncmd, njob, nev = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if ARGV[4] == '1' then
  local v = redis.call('HMGET', KEYS[5], 'state', 'step')
  if not v[1] then return -2 end
  if v[1] ~= ARGV[14] or v[2] ~= ARGV[5] then return -3 end
end
local a = 15
for d = 1, ndev do
  if ARGV[a] == '1' and (redis.call('EXISTS', KEYS[4 + 2 * d]) ~= tonumber(ARGV[a + 1]) or
      redis.call('ZCARD', KEYS[5 + 2 * d]) ~= tonumber(ARGV[a + 2])) then
    return -5
  end
  a = a + 3
end
local base = 5 + 2 * ndev
local starts = {}
for j = 1, njob do starts[j] = {} end
local sets, dueAdd, dueRem = {}, {}, {}
for i = 1, ncmd do
  local co = KEYS[5 + 2 * tonumber(ARGV[a + 1])]
  sets[#sets + 1], sets[#sets + 2] = KEYS[base + i], ARGV[a + 4]
  if ARGV[a + 2] == '1' then
    redis.call('ZADD', co, 0, ARGV[a])
    dueAdd[#dueAdd + 1], dueAdd[#dueAdd + 2] = ARGV[a + 3], ARGV[a]
  else
    redis.call('ZREM', co, ARGV[a])
    dueRem[#dueRem + 1] = ARGV[a]
  end
  local j = tonumber(ARGV[a + 5])
  if j > 0 then table.insert(starts[j], a + 6) end
  a = a + 10
end
bulk('MSET', false, sets, 2)
bulk('ZADD', KEYS[2], dueAdd, 2)
bulk('ZREM', KEYS[2], dueRem, 1)
local jk = base + ncmd
for j = 1, njob do
  noteExecs(KEYS[jk + 1], KEYS[jk + 2], KEYS[jk + 3], KEYS[jk + 4], ARGV[a], starts[j])
  jk, a = jk + 4, a + 1
end
if ARGV[4] == '1' then redis.call('HSET', KEYS[5], 'step', ARGV[6], 'next', ARGV[7]) end
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) end
appendEvents(KEYS[3], KEYS[4], ARGV[8], ARGV[9], span(a, nev))
return 0
`)

// createCommands admits and stores cmds, each with its events and, for a
// job's command, its execution, in one createCommandsScript: with step
// only if the job is running at step.Step, moving it on. It reads the
// devices of the queued commands, admits them, and writes if the devices
// are as read, else reads again.
func (s *Store) createCommands(ctx context.Context, appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq, step *jobStep) ([]store.Command, error) {
	var maxID int64
	for _, c := range cmds {
		maxID = max(maxID, c.ID)
	}
	if len(cmds) > 0 {
		if err := raiseScript.Run(ctx, s.rdb, []string{s.maxIDKey(), s.cmdAppsKey()}, maxID, appKey).Err(); err != nil {
			return nil, err
		}
	}
	b := newCmdBatch(appKey, cmds)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		out, err := s.tryCreateCommands(ctx, b, seqNo, seq, step)
		if !errors.Is(err, errRetry) {
			return out, err
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, errContention
}

// errRetry says a compare-and-set lost: read again.
var errRetry = errors.New("retry")

// cmdBatch is a batch of commands of one app with the devices they name,
// each once, and which of those admission reads (queued commands').
type cmdBatch struct {
	app     string
	cmds    []store.Command
	devices []string
	dev     map[string]int // device name to its place in devices
	checked []bool
}

func newCmdBatch(app string, cmds []store.Command) *cmdBatch {
	b := &cmdBatch{app: app, cmds: cmds, dev: map[string]int{}}
	for _, c := range cmds {
		d, ok := b.dev[c.DeviceName]
		if !ok {
			d = len(b.devices)
			b.dev[c.DeviceName] = d
			b.devices = append(b.devices, c.DeviceName)
			b.checked = append(b.checked, false)
		}
		b.checked[d] = b.checked[d] || c.State == store.CmdQueued
	}
	return b
}

// tryCreateCommands is one read, admission and compare-and-set of
// createCommands; errRetry if a device changed in between.
func (s *Store) tryCreateCommands(ctx context.Context, b *cmdBatch, seqNo int64, seq store.CommandSeq, step *jobStep) ([]store.Command, error) {
	exists := make([]*goredis.IntCmd, len(b.devices))
	open := make([]*goredis.IntCmd, len(b.devices))
	if slices.Contains(b.checked, true) {
		if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for d, name := range b.devices {
				if b.checked[d] {
					exists[d] = p.Exists(ctx, s.devKey(b.app, name))
					open[d] = p.ZCard(ctx, s.cmdOpenKey(b.app, name))
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(b.cmds)
	opened := make([]int, len(b.devices))
	for i := range out {
		c := &out[i]
		c.AppKey = b.app
		if c.State != store.CmdQueued {
			continue
		}
		d := b.dev[c.DeviceName]
		if store.AdmitCommand(c, exists[d].Val() > 0, int(open[d].Val())+opened[d]) {
			opened[d]++
		}
	}
	var e *store.SeqEntry
	if seq != nil {
		e = seq(out)
	}
	keys, args, err := s.createCommandsArgs(b, out, seqNo, e, step, exists, open)
	if err != nil {
		return nil, err
	}
	res, err := s.run(ctx, createCommandsScript, keys, args...).Int64()
	switch {
	case err != nil:
		return nil, err
	case res == codeSeqUsed:
		return nil, store.ErrSeqUsed
	case res == codeNotFound:
		return nil, store.ErrNotFound
	case res == codeConflict:
		return nil, store.ErrVersionConflict
	case res == codeRetry:
		return nil, errRetry
	}
	return out, nil
}

// createCommandsArgs lays out createCommandsScript's keys and arguments
// for out, the batch as admitted, clearing each command's Emit.
func (s *Store) createCommandsArgs(b *cmdBatch, out []store.Command, seqNo int64, e *store.SeqEntry, step *jobStep, exists, open []*goredis.IntCmd) ([]string, []any, error) {
	has, seqData, pxat, err := seqArgs(e)
	if err != nil {
		return nil, nil, err
	}
	app := b.app
	st := jobStep{}
	if step != nil {
		st = *step
	}
	keys := make([]string, 0, 5+2*len(b.devices)+len(out)+4)
	keys = append(keys, s.seqKey(app, seqNo), s.cmdDueKey(app), s.eventStreamKey(app), s.eventLastKey(app), s.jobKey(app, st.ID))
	args := make([]any, 0, 14+3*len(b.devices)+10*len(out))
	args = append(args, has, seqData, pxat, boolArg(step != nil), itoa(st.Step), itoa(st.Step+1), itoa(st.Next),
		s.eventChannel(), app, len(b.devices), len(out), 0, 0, store.JobRunning)
	for d, name := range b.devices {
		keys = append(keys, s.devKey(app, name), s.cmdOpenKey(app, name))
		if b.checked[d] {
			args = append(args, "1", exists[d].Val(), open[d].Val())
		} else {
			args = append(args, "0", 0, 0)
		}
	}
	var jobs []int64
	var evs []store.Event
	for i := range out {
		c := &out[i]
		evs = append(evs, store.Stamp(c.Emit, app, c.DeviceName)...)
		c.Emit = nil
		data, err := json.Marshal(*c)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, s.cmdKey(app, c.ID))
		args = append(args, idMember(c.ID), b.dev[c.DeviceName]+1, boolArg(c.Open()), c.Due(), data)
		if c.Job == 0 {
			args = append(args, 0, "", "", "", "")
			continue
		}
		j := slices.Index(jobs, c.Job)
		if j < 0 {
			j = len(jobs)
			jobs = append(jobs, c.Job)
		}
		ex, err := json.Marshal(store.ExecutionOf(*c))
		if err != nil {
			return nil, nil, err
		}
		args = append(args, j+1, itoa(c.JobIndex), c.Attempt, c.State, ex)
	}
	for _, id := range jobs {
		keys = append(keys, s.jobKey(app, id), s.jobExecsKey(app, id), s.jobCountsKey(app, id), s.jobIndexKey(app, id))
		args = append(args, s.jobStatePrefix(app, id))
	}
	args[11], args[12] = len(jobs), len(evs)
	return keys, append(args, eventArgs(evs)...), nil
}

// putCommand adds the writes of c, encoded as data, to p.
func (s *Store) putCommand(ctx context.Context, p goredis.Pipeliner, c store.Command, data []byte) {
	p.Set(ctx, s.cmdKey(c.AppKey, c.ID), data, 0)
	if c.Open() {
		p.ZAdd(ctx, s.cmdOpenKey(c.AppKey, c.DeviceName), goredis.Z{Member: idMember(c.ID)})
		p.ZAdd(ctx, s.cmdDueKey(c.AppKey), goredis.Z{Score: float64(c.Due()), Member: idMember(c.ID)})
	} else {
		p.ZRem(ctx, s.cmdOpenKey(c.AppKey, c.DeviceName), idMember(c.ID))
		p.ZRem(ctx, s.cmdDueKey(c.AppKey), idMember(c.ID))
	}
}

// GetCommand returns the app's command, or store.ErrNotFound.
func (s *Store) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	var c store.Command
	if err := getJSON(ctx, s.rdb, s.cmdKey(appKey, id), &c); err != nil {
		return store.Command{}, err
	}
	return c, nil
}

// UpdateCommand applies fn in an optimistic transaction on the command;
// see store.Commands. A job's command writes its execution in the same
// MULTI, lazy writes included (Redis has one durability for all writes).
func (s *Store) UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error) {
	k := s.cmdKey(appKey, id)
	var out store.Command
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		var c store.Command
		if err := getJSON(ctx, tx, k, &c); err != nil {
			return err
		}
		if _, err := store.ApplyCommandUpdate(&c, id, appKey, fn); err != nil {
			return err
		}
		evs := c.Emit
		c.Emit = nil
		data, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			s.putCommand(ctx, p, c, data)
			if err := s.putExecution(ctx, p, c); err != nil {
				return err
			}
			s.txAppend(ctx, p, appKey, evs)
			return nil
		}); err != nil {
			return err
		}
		out = c
		return nil
	}, k)
	if err != nil {
		return store.Command{}, err
	}
	return out, nil
}

// OpenCommands returns the device's open commands in id order.
func (s *Store) OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error) {
	members, err := s.rdb.ZRange(ctx, s.cmdOpenKey(appKey, device), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("open commands: %w", err)
	}
	return s.getCommands(ctx, appKey, members)
}

// getCommands reads the app's commands of members (idMember), skipping
// those gone and those ended.
func (s *Store) getCommands(ctx context.Context, appKey string, members []string) ([]store.Command, error) {
	if len(members) == 0 {
		return nil, nil
	}
	keys := make([]string, len(members))
	for i, m := range members {
		u, err := strconv.ParseUint(m, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("command index member %q: %w", m, err)
		}
		keys[i] = s.cmdKey(appKey, int64(u^(1<<63)))
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read commands: %w", err)
	}
	out := make([]store.Command, 0, len(vals))
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var c store.Command
		if err := json.Unmarshal([]byte(str), &c); err != nil {
			return nil, fmt.Errorf("decode command: %w", err)
		}
		if c.Open() {
			out = append(out, c)
		}
	}
	return out, nil
}

// DueCommands returns open commands due at or before before, earliest
// first, from the apps that have had commands.
func (s *Store) DueCommands(ctx context.Context, before int64, limit int) ([]store.Command, error) {
	apps, err := s.rdb.SMembers(ctx, s.cmdAppsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("due commands: %w", err)
	}
	var out []store.Command
	for _, app := range apps {
		members, err := s.rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{
			Key: s.cmdDueKey(app), Start: "-inf", Stop: strconv.FormatInt(before, 10), ByScore: true, Count: int64(limit),
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("due commands of %s: %w", app, err)
		}
		cs, err := s.getCommands(ctx, app, members)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	slices.SortFunc(out, func(a, b store.Command) int {
		if a.Due() != b.Due() {
			return int(a.Due() - b.Due())
		}
		return int(a.ID - b.ID)
	})
	return out[:min(len(out), limit)], nil
}

// LastCommandID returns the highest command id stored, or above: the
// shared id counter, raised before each write.
func (s *Store) LastCommandID(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.maxIDKey()).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last command id: %w", err)
	}
	return strconv.ParseInt(v, 10, 64)
}
