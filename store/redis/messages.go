package redis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// CreateMessage stores m, queues it if pending, adds its records to the
// outbox and records seq, in one script on the app's slot; see store.Store
// for the errors, which are checked in the order ErrSeqUsed, ErrNotFound,
// ErrQueueFull. On Redis Cluster, one script on the global slot runs
// first, raising the highest message id and handing out the outbox Seqs:
// a crash between the two leaves an unused id and unused Seqs, which are
// never handed out. Elsewhere the one script does that too.
func (s *Store) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	if s.inline {
		return s.writeMessage(ctx, m, seqNo, seq, true, 0)
	}
	last, err := s.globalStep(ctx, itoa(m.ID), len(m.Records), m.AppKey, m.State == store.StatePending)
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	return s.writeMessage(ctx, m, seqNo, seq, false, last-int64(len(m.Records))+1)
}

// writeMessage runs createMessageScript: inline, or after the global step
// handed out the Seqs from first on.
func (s *Store) writeMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry, inline bool, first int64) error {
	has, seqData, pxat, err := seqArgs(seq)
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	keys := []string{
		s.seqKey(m.AppKey, seqNo), s.msgKey(m.AppKey, m.ID), s.devKey(m.AppKey, m.DeviceName),
		s.queueKey(m.AppKey, m.DeviceName), s.expKey(m.AppKey), s.outboxKey(m.AppKey),
		s.flagKey(m.AppKey, activeCB), s.flagKey(m.AppKey, activeExp),
	}
	if inline {
		keys = append(keys, s.maxIDKey(), s.seqCounterKey(), s.activeKey(activeCB), s.activeKey(activeExp))
	}
	keys = append(keys, s.msgsKey(m.AppKey)) // last, wherever the others end
	args := []any{
		has, seqData, pxat, boolArg(m.State == store.StatePending), data, idMember(m.ID), m.ExpireTime, store.MaxPending,
		boolArg(inline), itoa(m.ID), m.AppKey,
	}
	if args, err = s.appendEntries(args, m, 0, first); err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	res, err := s.run(ctx, createMessageScript, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	switch res {
	case codeSeqUsed:
		return store.ErrSeqUsed
	case codeNotFound:
		return store.ErrNotFound
	case codeConflict:
		return store.ErrQueueFull
	}
	if err := s.listApp(ctx, m.AppKey, res); err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// seqPlaceholder starts the JSON of an entry with Seq 0, which a script
// that hands out Seqs itself rewrites (seqLua).
var seqPlaceholder = []byte(`{"seq":0,`)

// appendEntries appends Seq and JSON of the outbox entries of m's records
// from index from on to args, with Seqs from first on; first 0 leaves
// them 0 for the script to fill in.
func (s *Store) appendEntries(args []any, m store.Message, from int, first int64) ([]any, error) {
	now := s.now().UnixMilli()
	for i := from; i < len(m.Records); i++ {
		e := store.OutboxEntry{
			ID:          store.RecordID(m.ID, i),
			AppKey:      m.AppKey,
			CallbackURL: m.CallbackURL,
			Time:        now,
			Record:      m.Filled(m.Records[i]),
		}
		if first != 0 {
			e.Seq = first + int64(i-from)
		}
		data, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if first == 0 && !bytes.HasPrefix(data, seqPlaceholder) {
			return nil, fmt.Errorf("outbox entry JSON starts %.10q, not with its Seq", data)
		}
		args = append(args, e.Seq, data)
	}
	return args, nil
}

// GetMessage returns the app's message or store.ErrNotFound (also when
// the id is another app's: messages are keyed under their app).
func (s *Store) GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error) {
	var m store.Message
	if err := getJSON(ctx, s.rdb, s.msgKey(appKey, id), &m); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return m, err
		}
		return m, fmt.Errorf("get message %d: %w", id, err)
	}
	return m, nil
}

// LastMessageID returns the highest message id stored, 0 when there is
// none. On Redis Cluster it is raised before the message is written, so
// it may name a message that was refused or lost in a crash; it is never
// below a stored id, which is what a restarted node needs.
func (s *Store) LastMessageID(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.maxIDKey()).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last message id: %w", err)
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("last message id %q: %w", v, err)
	}
	return id, nil
}

// PendingMessages returns up to limit of the device's pending messages in
// msgid order, which is send order.
func (s *Store) PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error) {
	ids, err := s.PendingIDs(ctx, appKey, deviceName, limit)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	out, err := s.getMessages(ctx, appKey, ids)
	if err != nil {
		return nil, fmt.Errorf("pending messages of %s/%s: %w", appKey, deviceName, err)
	}
	return out, nil
}

// ListMessages returns up to limit of the app's messages with ids below
// before (0: from the newest), newest first, from the app's index.
func (s *Store) ListMessages(ctx context.Context, appKey string, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	upper := "+"
	if before > 0 {
		upper = "(" + idMember(before)
	}
	members, err := s.rdb.ZRevRangeByLex(ctx, s.msgsKey(appKey), &goredis.ZRangeBy{Max: upper, Min: "-", Count: int64(limit)}).Result()
	if err != nil {
		return nil, fmt.Errorf("messages of %s: %w", appKey, err)
	}
	ids := make([]int64, len(members))
	for i, mem := range members {
		if ids[i], err = parseIDMember(mem); err != nil {
			return nil, fmt.Errorf("messages of %s: %w", appKey, err)
		}
	}
	out, err := s.getMessages(ctx, appKey, ids)
	if err != nil {
		return nil, fmt.Errorf("messages of %s: %w", appKey, err)
	}
	return out, nil
}

// getMessages reads the app's messages with the ids, in order; every one
// must exist (queue and index entries are written with their message).
func (s *Store) getMessages(ctx context.Context, appKey string, ids []int64) ([]store.Message, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.msgKey(appKey, id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]store.Message, 0, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("index names missing message %d", ids[i])
		}
		var m store.Message
		if err := json.Unmarshal([]byte(str), &m); err != nil {
			return nil, fmt.Errorf("decode %q: %w", keys[i], err)
		}
		out = append(out, m)
	}
	return out, nil
}

func parseIDMember(mem string) (int64, error) {
	u, err := strconv.ParseUint(mem, 16, 64)
	if err != nil || len(mem) != 16 {
		return 0, fmt.Errorf("malformed queue member %q", mem)
	}
	return int64(u ^ (1 << 63)), nil
}

// UpdateMessage applies fn to the message and stores the result with a
// compare-and-set script: the write happens only if the message is still
// as read, else the message is read again and fn runs again. The script
// also takes a message that leaves pending off its queue and expiry index
// and adds the new records to the outbox; see store.Store.
func (s *Store) UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error) {
	k := s.msgKey(appKey, id)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		old, err := s.rdb.Get(ctx, k).Bytes()
		if errors.Is(err, goredis.Nil) {
			return store.Message{}, store.ErrNotFound
		}
		if err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
		var m store.Message
		if err := json.Unmarshal(old, &m); err != nil {
			return store.Message{}, fmt.Errorf("decode message %d: %w", id, err)
		}
		dev := m.DeviceName
		n, leaving, err := store.ApplyUpdate(&m, id, appKey, fn)
		if err != nil {
			return store.Message{}, err
		}
		data, err := json.Marshal(m)
		if err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
		args := []any{old, data, boolArg(leaving), idMember(id), boolArg(s.inline), appKey}
		keys := []string{k, s.queueKey(appKey, dev), s.expKey(appKey), s.outboxKey(appKey), s.flagKey(appKey, activeCB)}
		var first int64
		if s.inline {
			keys = append(keys, s.seqCounterKey(), s.activeKey(activeCB))
		} else if added := len(m.Records) - n; added > 0 {
			last, err := s.globalStep(ctx, "", added, appKey, false)
			if err != nil {
				return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
			}
			first = last - int64(added) + 1
		}
		if args, err = s.appendEntries(args, m, n, first); err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
		res, err := s.run(ctx, updateMessageScript, keys, args...).Int64()
		if err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
		if res == codeRetry {
			if err := backoff(ctx, attempt); err != nil {
				return store.Message{}, err
			}
			continue
		}
		if err := s.listApp(ctx, appKey, res); err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
		return m, nil
	}
	return store.Message{}, fmt.Errorf("update message %d: %w", id, errContention)
}

// ExpiredMessages returns pending messages that expired before before,
// merging the expiry indexes of the apps in the global exp index (and
// dropping from it the apps whose index is empty).
func (s *Store) ExpiredMessages(ctx context.Context, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	apps, err := s.rdb.SMembers(ctx, s.activeKey(activeExp)).Result()
	if err != nil {
		return nil, fmt.Errorf("expired messages: %w", err)
	}
	if len(apps) == 0 {
		return nil, nil
	}
	ranges := make([]*goredis.ZSliceCmd, len(apps))
	exists := make([]*goredis.IntCmd, len(apps))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, app := range apps {
			ranges[i] = p.ZRangeByScoreWithScores(ctx, s.expKey(app), &goredis.ZRangeBy{
				Min: "-inf", Max: "(" + strconv.FormatInt(before, 10), Count: int64(limit),
			})
			exists[i] = p.Exists(ctx, s.expKey(app))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expired messages: %w", err)
	}
	type due struct {
		expire float64
		member string
		app    string
	}
	var all []due
	var idle []string
	for i, app := range apps {
		for _, z := range ranges[i].Val() {
			all = append(all, due{z.Score, z.Member.(string), app})
		}
		if exists[i].Val() == 0 {
			idle = append(idle, app)
		}
	}
	slices.SortFunc(all, func(a, b due) int {
		if a.expire != b.expire {
			if a.expire < b.expire {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.member, b.member); c != 0 {
			return c
		}
		return strings.Compare(a.app, b.app)
	})
	all = all[:min(len(all), limit)]
	cmds := make([]*goredis.StringCmd, len(all))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, d := range all {
			id, err := parseIDMember(d.member)
			if err != nil {
				return err
			}
			cmds[i] = p.Get(ctx, s.msgKey(d.app, id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("expired messages: %w", err)
	}
	out := make([]store.Message, 0, len(all))
	for i, c := range cmds {
		b, err := c.Bytes()
		if err != nil {
			return nil, fmt.Errorf("expired messages: message %s of %s: %w", all[i].member, all[i].app, err)
		}
		var m store.Message
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("expired messages: decode %s of %s: %w", all[i].member, all[i].app, err)
		}
		out = append(out, m)
	}
	if err := s.prune(ctx, activeExp, idle); err != nil {
		return nil, fmt.Errorf("expired messages: %w", err)
	}
	return out, nil
}

// PendingIDs returns the ids of up to limit of the device's pending
// messages in send order, from its queue.
func (s *Store) PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error) {
	if limit < 1 {
		return nil, nil
	}
	members, err := s.rdb.ZRange(ctx, s.queueKey(appKey, deviceName), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("pending messages of %s/%s: %w", appKey, deviceName, err)
	}
	ids := make([]int64, len(members))
	for i, mem := range members {
		if ids[i], err = parseIDMember(mem); err != nil {
			return nil, fmt.Errorf("pending messages of %s/%s: %w", appKey, deviceName, err)
		}
	}
	return ids, nil
}

// UpdateMessages applies the updates one by one (each is one optimistic
// transaction of its own); see store.Store.
func (s *Store) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	return store.UpdateOneByOne(ctx, s.UpdateMessage, updates)
}
