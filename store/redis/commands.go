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
// generator). Each write is an optimistic transaction on the keys it
// reads, with the events it emits appended in its MULTI and, for a job's
// command, its execution written there too (jobs.go).

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

// createCommands admits and stores cmds in one optimistic transaction on
// the devices they name (and, for a job's step, the job): each with its
// events and, for a job's command, its execution. With step, the write
// happens only if the job is running at step.Step, and moves it on.
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
	keys := []string{s.seqKey(appKey, seqNo)}
	if step != nil {
		keys = append(keys, s.jobKey(appKey, step.ID))
	}
	for _, c := range cmds {
		keys = append(keys, s.devKey(appKey, c.DeviceName), s.cmdOpenKey(appKey, c.DeviceName))
	}
	keys = slices.Compact(keys)
	var out []store.Command
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		if seq != nil {
			n, err := tx.Exists(ctx, s.seqKey(appKey, seqNo)).Result()
			if err != nil {
				return err
			}
			if n > 0 {
				return store.ErrSeqUsed
			}
		}
		out = slices.Clone(cmds)
		exists := map[string]*goredis.IntCmd{}
		counts := map[string]*goredis.IntCmd{}
		var job *goredis.SliceCmd
		if _, err := tx.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if step != nil {
				job = p.HMGet(ctx, s.jobKey(appKey, step.ID), "state", "step")
			}
			for _, c := range out {
				if c.State == store.CmdQueued && exists[c.DeviceName] == nil {
					exists[c.DeviceName] = p.Exists(ctx, s.devKey(appKey, c.DeviceName))
					counts[c.DeviceName] = p.ZCard(ctx, s.cmdOpenKey(appKey, c.DeviceName))
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step.check(job); err != nil {
			return err
		}
		opened := map[string]int{}
		for i := range out {
			c := &out[i]
			c.AppKey = appKey
			if c.State != store.CmdQueued {
				continue
			}
			if store.AdmitCommand(c, exists[c.DeviceName].Val() > 0, int(counts[c.DeviceName].Val())+opened[c.DeviceName]) {
				opened[c.DeviceName]++
			}
		}
		var e *store.SeqEntry
		if seq != nil {
			e = seq(out)
		}
		has, seqData, pxat, err := seqArgs(e)
		if err != nil {
			return err
		}
		var evs []store.Event
		datas := make([][]byte, len(out))
		for i := range out {
			evs = append(evs, store.Stamp(out[i].Emit, appKey, out[i].DeviceName)...)
			out[i].Emit = nil
			if datas[i], err = json.Marshal(out[i]); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for i, c := range out {
				s.putCommand(ctx, p, c, datas[i])
			}
			if err := s.putExecutions(ctx, p, appKey, out); err != nil {
				return err
			}
			if step != nil {
				p.HSet(ctx, s.jobKey(appKey, step.ID), "step", step.Step+1, "next", step.Next)
			}
			if has == "1" {
				p.Do(ctx, "SET", s.seqKey(appKey, seqNo), seqData, "PXAT", pxat)
			}
			s.txAppend(ctx, p, appKey, evs)
			return nil
		})
		return err
	}, keys...)
	if err != nil {
		return nil, err
	}
	return out, nil
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
			if err := s.putExecutions(ctx, p, appKey, []store.Command{c}); err != nil {
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
