package redis

import (
	"cmp"
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

// broadcastKey holds a broadcast as a hash on the app's slot: "def" the
// JSON of the broadcast as created, and the fields that change as plain
// strings (state, chunk, queued, first, last, swept), so that a script
// can move the fan-out on without decoding JSON numbers.
func (s *Store) broadcastKey(app string, id int64) string { return s.app(app) + "bc:" + itoa(id) }

// targetsKey holds chunk n of a broadcast's targets, on the app's slot:
// the names joined by \0, which none holds.
func (s *Store) targetsKey(app string, id int64, n int) string {
	return s.app(app) + "bt:" + itoa(id) + ":" + strconv.Itoa(n)
}

// activeBroadcastsKey is the global index of broadcasts that may be
// active, members "<id> <app>". An entry is added before its broadcast is
// written and dropped by ActiveBroadcasts once the broadcast is no longer
// active (or was never written), so the index may hold extra entries,
// never miss one.
func (s *Store) activeBroadcastsKey() string { return s.global + ":bcasts" }

// createMessagesScript stores a batch of messages of one app with their
// queue, expiry and outbox entries, records the seq_no entry built from
// each message's answer, and moves a broadcast's fan-out on, atomically.
// Returns {code} on refusal (-1 seq_no used, -3 broadcast not fanning
// out at the step's chunk), else {flagList bits, outcome of each
// message...}.
//
// KEYS: seq_no entry, expiry index, outbox, cb flag, exp flag, message
// index, broadcast, the step's chunk of targets; inline also maxid, Seq
// counter, act:cb, act:exp; then message, device and queue key of each
// message.
// ARGV: has seq, body prefix, body suffix, entry JSON head, entry expiry,
// MaxPending, inline, app, highest msgid (unused: inline raises maxid
// to the highest stored one), has step, step chunk, the chunk after it,
// step done, message count; then per message: pending, queue member,
// expire time, id, message JSON, full JSON, three answers, record count
// of each, then Seq and JSON of the message's outbox entries and of the
// full one's (both numbered from the same Seqs; only one is stored).
var createMessagesScript = newScript(cmpLua + listLua + seqLua + `
local inline = ARGV[7] == '1'
local base = 9
if inline then base = 13 end
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
if ARGV[10] == '1' then
  local st = redis.call('HGET', KEYS[7], 'state')
  local cur = redis.call('HGET', KEYS[7], 'chunk')
  if st ~= 'fanning_out' or cur ~= ARGV[11] then return {-3} end
end
local n = tonumber(ARGV[14])
local maxPending = tonumber(ARGV[6])
local blocks, extra = {}, {}
local a, total, anyPending = 15, 0, false
for i = 1, n do
  local b = {pending = ARGV[a] == '1', member = ARGV[a+1], expire = ARGV[a+2], id = ARGV[a+3],
    msg = ARGV[a+4], full = ARGV[a+5], nrec = tonumber(ARGV[a+9]), nfull = tonumber(ARGV[a+10])}
  b.recs = a + 11
  b.frecs = b.recs + 2 * b.nrec
  b.answer = {ARGV[a+6], ARGV[a+7], ARGV[a+8]}
  a = b.frecs + 2 * b.nfull
  local k = base + 3 * (i - 1)
  b.mk, b.dk, b.qk = KEYS[k], KEYS[k+1], KEYS[k+2]
  b.outcome = 0
  if b.pending then
    if redis.call('EXISTS', b.dk) == 0 then
      b.outcome = 2
    elseif redis.call('ZCARD', b.qk) + (extra[b.qk] or 0) >= maxPending then
      b.outcome = 1
    else
      extra[b.qk] = (extra[b.qk] or 0) + 1
      anyPending = true
    end
  end
  if b.outcome == 0 then total = total + b.nrec elseif b.outcome == 1 then total = total + b.nfull end
  blocks[i] = b
end
local first = 0
if inline then
  local top = nil
  for i = 1, n do
    if blocks[i].outcome ~= 2 and (top == nil or cmp(blocks[i].id, top) > 0) then top = blocks[i].id end
  end
  local cur = redis.call('GET', KEYS[9]) or '0'
  if top ~= nil and cmp(top, cur) > 0 then redis.call('SET', KEYS[9], top) end
  if total > 0 then
    first = redis.call('INCRBY', KEYS[10], total) - total + 1
    redis.call('SADD', KEYS[11], ARGV[8])
  end
  if anyPending then redis.call('SADD', KEYS[12], ARGV[8]) end
end
local out, answers = {0}, {}
local stored, lo, hi = 0, nil, nil
for i = 1, n do
  local b = blocks[i]
  out[i + 1] = b.outcome
  answers[i] = b.answer[b.outcome + 1]
  if b.outcome ~= 2 then
    stored = stored + 1
    if lo == nil or cmp(b.id, lo) < 0 then lo = b.id end
    if hi == nil or cmp(b.id, hi) > 0 then hi = b.id end
    redis.call('ZADD', KEYS[6], 0, b.member)
    if b.outcome == 0 then
      redis.call('SET', b.mk, b.msg)
      if b.pending then
        redis.call('ZADD', b.qk, 0, b.member)
        redis.call('ZADD', KEYS[2], b.expire, b.member)
      end
      addOutbox(KEYS[3], b.recs, b.nrec, inline, first)
      if inline then first = first + b.nrec end
    else
      redis.call('SET', b.mk, b.full)
      addOutbox(KEYS[3], b.frecs, b.nfull, inline, first)
      if inline then first = first + b.nfull end
    end
  end
end
if anyPending and list(KEYS[5]) then out[1] = out[1] + 2 end
if total > 0 and list(KEYS[4]) then out[1] = out[1] + 1 end
if inline then out[1] = 0 end
if ARGV[1] == '1' then
  local body = ARGV[2] .. table.concat(answers, ',') .. ARGV[3]
  redis.call('SET', KEYS[1], ARGV[4] .. cjson.encode(body) .. '}', 'PXAT', ARGV[5])
end
if ARGV[10] == '1' then
  redis.call('HINCRBY', KEYS[7], 'queued', stored)
  redis.call('HSET', KEYS[7], 'chunk', ARGV[12])
  redis.call('DEL', KEYS[8])
  if ARGV[13] == '1' then redis.call('HSET', KEYS[7], 'state', 'done') end
  if lo ~= nil then
    local f = redis.call('HGET', KEYS[7], 'first') or '0'
    if f == '0' or cmp(lo, f) < 0 then redis.call('HSET', KEYS[7], 'first', lo) end
    local l = redis.call('HGET', KEYS[7], 'last') or '0'
    if cmp(hi, l) > 0 then redis.call('HSET', KEYS[7], 'last', hi) end
  end
end
return out
`)

// seqHead is the JSON of a seq_no entry up to its body, which
// createMessagesScript appends as a string (body_text) and closes.
func seqHead(e store.SeqEntry) ([]byte, error) {
	fp, err := json.Marshal(e.Fingerprint)
	if err != nil {
		return nil, err
	}
	return []byte(`{"fingerprint":` + string(fp) + `,"status":` + strconv.Itoa(e.Status) +
		`,"expires_at":` + itoa(e.ExpiresAt) + `,"body_text":`), nil
}

// CreateMessages stores the batch in one script on the app's slot; on
// Redis Cluster a global step first raises the highest msgid and hands
// out the Seqs, as for CreateMessage. See store.Store.
func (s *Store) CreateMessages(ctx context.Context, appKey string, msgs []store.BatchMessage, seq *store.BatchSeq, step *store.BroadcastStep) ([]int, error) {
	if len(msgs) == 0 && seq == nil && step == nil {
		return nil, nil
	}
	var maxID int64
	nrecs, pending := 0, false
	for _, bm := range msgs {
		maxID = max(maxID, bm.Message.ID)
		nrecs += max(len(bm.Message.Records), len(bm.Full.Records))
		pending = pending || bm.Message.State == store.StatePending
	}
	var first int64
	if !s.inline && len(msgs) > 0 {
		last, err := s.globalStep(ctx, itoa(maxID), nrecs, appKey, pending)
		if err != nil {
			return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
		}
		first = last - int64(nrecs) + 1
	}
	keys, args, err := s.createMessagesArgs(appKey, msgs, seq, step, maxID, first)
	if err != nil {
		return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
	}
	res, err := s.run(ctx, createMessagesScript, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
	}
	switch {
	case len(res) == 1 && res[0] == codeSeqUsed:
		return nil, store.ErrSeqUsed
	case len(res) == 1 && res[0] == codeConflict:
		return nil, store.ErrVersionConflict
	case len(res) != len(msgs)+1:
		return nil, fmt.Errorf("create %d messages in %s: %d results", len(msgs), appKey, len(res))
	}
	if err := s.listApp(ctx, appKey, res[0]); err != nil {
		return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
	}
	out := make([]int, len(msgs))
	for i, r := range res[1:] {
		out[i] = int(r)
	}
	return out, nil
}

// createMessagesArgs lays out createMessagesScript's keys and arguments.
func (s *Store) createMessagesArgs(appKey string, msgs []store.BatchMessage, seq *store.BatchSeq, step *store.BroadcastStep, maxID, first int64) ([]string, []any, error) {
	var seqNo, bcID int64
	chunk := 0
	if seq != nil {
		seqNo = seq.SeqNo
	}
	if step != nil {
		bcID, chunk = step.ID, step.Chunk
	}
	keys := []string{
		s.seqKey(appKey, seqNo), s.expKey(appKey), s.outboxKey(appKey), s.flagKey(appKey, activeCB),
		s.flagKey(appKey, activeExp), s.msgsKey(appKey), s.broadcastKey(appKey, bcID), s.targetsKey(appKey, bcID, chunk),
	}
	if s.inline {
		keys = append(keys, s.maxIDKey(), s.seqCounterKey(), s.activeKey(activeCB), s.activeKey(activeExp))
	}
	args := make([]any, 0, 14+len(msgs)*20)
	if seq != nil {
		head, err := seqHead(seq.Entry)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, "1", seq.Prefix, seq.Suffix, head, max(seq.Entry.ExpiresAt, 1))
	} else {
		args = append(args, "0", "", "", "", 1)
	}
	args = append(args, store.MaxPending, boolArg(s.inline), appKey, itoa(maxID))
	if step != nil {
		args = append(args, "1", strconv.Itoa(step.Chunk), strconv.Itoa(step.Chunk+1), boolArg(step.Done))
	} else {
		args = append(args, "0", "", "", "0")
	}
	args = append(args, len(msgs))
	for _, bm := range msgs {
		m, f := bm.Message, bm.Full
		m.AppKey, f.AppKey = appKey, appKey
		mj, err := json.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		fj, err := json.Marshal(f)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, s.msgKey(appKey, m.ID), s.devKey(appKey, m.DeviceName), s.queueKey(appKey, m.DeviceName))
		args = append(args, boolArg(m.State == store.StatePending), idMember(m.ID), m.ExpireTime, itoa(m.ID), mj, fj,
			bm.Answers[0], bm.Answers[1], bm.Answers[2], len(m.Records), len(f.Records))
		if args, err = s.appendEntries(args, m, 0, first); err != nil {
			return nil, nil, err
		}
		if args, err = s.appendEntries(args, f, 0, first); err != nil {
			return nil, nil, err
		}
		if first != 0 {
			first += int64(max(len(m.Records), len(f.Records)))
		}
	}
	return keys, args, nil
}

// createBroadcastScript stores a new broadcast's hash and its chunks of
// targets and records the seq_no. KEYS: seq_no entry, broadcast, then
// each chunk of targets. ARGV: has seq, entry JSON, entry expiry, the
// number of hash arguments, the hash's field and value pairs, then each
// chunk's names. Returns -1 seq_no used, -4 exists, else 0.
var createBroadcastScript = newScript(`
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[2]) == 1 then return -4 end
local nf = tonumber(ARGV[4])
local fields = {}
for i = 5, 4 + nf do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(fields))
for i = 3, #KEYS do redis.call('SET', KEYS[i], ARGV[4 + nf + i - 2]) end
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) end
return 0
`)

// broadcastFields is b's hash as field and value pairs.
func broadcastFields(b store.Broadcast) ([]any, error) {
	def, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return []any{"def", def, "state", b.State, "chunk", b.Chunk, "queued", b.Queued,
		"first", itoa(b.FirstID), "last", itoa(b.LastID), "swept", boolArg(b.Swept)}, nil
}

// decodeBroadcast reads a broadcast's hash; store.ErrNotFound if empty.
func decodeBroadcast(h map[string]string) (store.Broadcast, error) {
	var b store.Broadcast
	def, ok := h["def"]
	if !ok {
		return b, store.ErrNotFound
	}
	if err := json.Unmarshal([]byte(def), &b); err != nil {
		return b, fmt.Errorf("decode broadcast: %w", err)
	}
	b.State, b.Swept = h["state"], h["swept"] == "1"
	var err error
	var chunk int64
	for _, f := range []struct {
		name string
		to   *int64
	}{{"queued", &b.Queued}, {"first", &b.FirstID}, {"last", &b.LastID}, {"chunk", &chunk}} {
		if *f.to, err = strconv.ParseInt(cmp.Or(h[f.name], "0"), 10, 64); err != nil {
			return b, fmt.Errorf("decode broadcast %s: %w", f.name, err)
		}
	}
	b.Chunk = int(chunk)
	return b, nil
}

func bcMember(app string, id int64) string { return itoa(id) + " " + app }

// CreateBroadcast adds b to the global active index, then stores it with
// its targets and records seq in one script on the app's slot.
func (s *Store) CreateBroadcast(ctx context.Context, b store.Broadcast, targets [][]string, seqNo int64, seq *store.SeqEntry) error {
	has, data, pxat, err := seqArgs(seq)
	if err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	fields, err := broadcastFields(b)
	if err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	if err := s.rdb.ZAdd(ctx, s.activeBroadcastsKey(), goredis.Z{Score: float64(b.ID), Member: bcMember(b.AppKey, b.ID)}).Err(); err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	keys := make([]string, 0, 2+len(targets))
	keys = append(keys, s.seqKey(b.AppKey, seqNo), s.broadcastKey(b.AppKey, b.ID))
	args := make([]any, 0, 4+len(fields)+len(targets))
	args = append(append(args, has, data, pxat, len(fields)), fields...)
	for n, names := range targets {
		keys = append(keys, s.targetsKey(b.AppKey, b.ID, n))
		args = append(args, strings.Join(names, "\x00"))
	}
	res, err := s.run(ctx, createBroadcastScript, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	switch res {
	case codeSeqUsed:
		return store.ErrSeqUsed
	case codeExists:
		return store.ErrAlreadyExists
	}
	return nil
}

// BroadcastTargets returns chunk n of the broadcast's targets.
func (s *Store) BroadcastTargets(ctx context.Context, appKey string, id int64, n int) ([]string, error) {
	v, err := s.rdb.Get(ctx, s.targetsKey(appKey, id, n)).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("targets of broadcast %d: %w", id, err)
	}
	if v == "" {
		return []string{}, nil
	}
	return strings.Split(v, "\x00"), nil
}

// GetBroadcast returns the app's broadcast or store.ErrNotFound.
func (s *Store) GetBroadcast(ctx context.Context, appKey string, id int64) (store.Broadcast, error) {
	h, err := s.rdb.HGetAll(ctx, s.broadcastKey(appKey, id)).Result()
	if err != nil {
		return store.Broadcast{}, fmt.Errorf("get broadcast %d: %w", id, err)
	}
	return decodeBroadcast(h)
}

// UpdateBroadcast applies fn in an optimistic transaction on the
// broadcast's hash, so a fan-out step in between makes fn run again.
func (s *Store) UpdateBroadcast(ctx context.Context, appKey string, id int64, fn func(*store.Broadcast) error) (store.Broadcast, error) {
	k := s.broadcastKey(appKey, id)
	var out store.Broadcast
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		h, err := tx.HGetAll(ctx, k).Result()
		if err != nil {
			return err
		}
		b, err := decodeBroadcast(h)
		if err != nil {
			return err
		}
		chunk, chunks := b.Chunk, b.Chunks
		if err := fn(&b); err != nil {
			return err
		}
		b.ID, b.AppKey, b.Chunk, b.Chunks = id, appKey, chunk, chunks
		fields, err := broadcastFields(b)
		if err != nil {
			return err
		}
		// A broadcast that becomes active again (a done one cancelled:
		// its sweep is to come) goes back into the global index first,
		// as CreateBroadcast puts it there: a crash between the two
		// leaves an entry that ActiveBroadcasts drops, never an active
		// broadcast the fan-out workers cannot find.
		if b.Active() {
			if err := s.rdb.ZAdd(ctx, s.activeBroadcastsKey(), goredis.Z{Score: float64(id), Member: bcMember(appKey, id)}).Err(); err != nil {
				return err
			}
		}
		var stale []string // chunks no step will read
		if b.State != store.BroadcastFanningOut {
			for n := b.Chunk; n < b.Chunks; n++ {
				stale = append(stale, s.targetsKey(appKey, id, n))
			}
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.HSet(ctx, k, fields...)
			if len(stale) > 0 {
				p.Del(ctx, stale...)
			}
			return nil
		}); err != nil {
			return err
		}
		out = b
		return nil
	}, k)
	if err != nil {
		return store.Broadcast{}, err
	}
	return out, nil
}

// ActiveBroadcasts reads the global index and each broadcast it names,
// dropping the entries of broadcasts that are no longer active.
func (s *Store) ActiveBroadcasts(ctx context.Context) ([]store.Broadcast, error) {
	members, err := s.rdb.ZRange(ctx, s.activeBroadcastsKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("active broadcasts: %w", err)
	}
	var out []store.Broadcast
	for _, mem := range members {
		idStr, app, ok := strings.Cut(mem, " ")
		id, err := strconv.ParseInt(idStr, 10, 64)
		if !ok || err != nil {
			continue
		}
		b, err := s.GetBroadcast(ctx, app, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil && b.Active() {
			out = append(out, b)
			continue
		}
		// Done or swept: the entry goes. One whose broadcast is missing
		// stays, as its creator may be about to write it.
		if err == nil {
			if err := s.rdb.ZRem(ctx, s.activeBroadcastsKey(), mem).Err(); err != nil {
				return nil, fmt.Errorf("active broadcasts: %w", err)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.Broadcast) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
