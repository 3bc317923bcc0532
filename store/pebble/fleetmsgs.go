package pebble

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// lockStripes locks the given stripes, each once, in ascending order, and
// returns the function that unlocks them.
func (s *Store) lockStripes(idx []int) (unlock func()) {
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.locks[i].Lock()
	}
	return func() {
		for _, i := range slices.Backward(idx) {
			s.locks[i].Unlock()
		}
	}
}

// writeLazy is write without waiting for the fsync: the batch is in the
// WAL, in order, and durable with the next synced write or Barrier. It is
// counted in committing until it is published and in lazyWrites after,
// so a Barrier that could see it syncs first.
func (s *Store) writeLazy(fill func(b *pebble.Batch) error) error {
	return s.writeLazyOn(s.db.NewBatch(), fill)
}

// writeLazyOn is writeLazy adding to b, a batch of s's database (which
// it closes), what fill adds.
func (s *Store) writeLazyOn(b *pebble.Batch, fill func(b *pebble.Batch) error) error {
	defer b.Close()
	if err := fill(b); err != nil {
		return err
	}
	s.committing.Add(1)
	defer s.committing.Add(-1)
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.lazyWrites.Add(1)
	return nil
}

// markLazySynced records that the lazy writes up to n are synced.
func (s *Store) markLazySynced(n int64) {
	for {
		cur := s.lazySynced.Load()
		if n <= cur || s.lazySynced.CompareAndSwap(cur, n) {
			return
		}
	}
}

// CreateMessages stores the messages, their queue entries, outbox
// entries, seq and step in one batch (synced before it returns unless it
// is a step; see store.Fleet), holding the stripes of every device named
// and of the seq_no (and bcMu with a step) while it checks and applies
// it; see store.Store.
func (s *Store) CreateMessages(ctx context.Context, appKey string, msgs []store.BatchMessage, seq *store.BatchSeq, step *store.BroadcastStep) ([]int, error) {
	if err := s.enterWrite(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if step != nil {
		s.bcMu.Lock()
		defer s.bcMu.Unlock()
	}
	// The messages are encoded before any lock is taken, so the stripes
	// are held only for the checks and the copy into the batch; only a
	// queue-full form (a device holding MaxPending messages) is encoded
	// under them. A broadcast step's were encoded by PrepareStep.
	pre := preparedFor(step, msgs)
	enc, err := s.batchEncoding(appKey, msgs, pre)
	if err != nil {
		return nil, err
	}
	encoded, now := enc.msgs, enc.now
	unlock := s.lockStripes(batchStripes(appKey, msgs, seq))
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	b, err := s.checkBatch(appKey, seq, step)
	if err != nil {
		return nil, err
	}
	outcomes, devs, err := s.batchOutcomes(appKey, msgs, s.batchFound(seq, step), pre)
	if err != nil {
		return nil, err
	}
	// The batch is applied without waiting for its fsync, so the stripes
	// of up to a thousand devices are held only while it is applied, not
	// through the disk's latency: PUBACKs and sends of those devices go
	// on meanwhile. It is then synced after the stripes are released
	// (unless a step: see store.Fleet); a write that read it under a
	// stripe is after it in the WAL, so no crash keeps that write
	// without this one.
	batch, prebuilt := s.createBatch(pre, outcomes)
	// When every message is stored as encoded, its entries are enc.all
	// already.
	all := enc.all
	gather := !prebuilt && (all == nil || devs.changed)
	if gather {
		all = make([]kv, 0, len(msgs)*4)
	}
	err = s.writeLazyOn(batch, func(batch *pebble.Batch) error {
		var err error
		if all, err = addCreated(appKey, msgs, outcomes, encoded, now, all, gather, step, &b); err != nil {
			return err
		}
		// Prebuilt, all is empty: the batch holds the messages.
		if err := eachInKeyOrder(all, func(e kv) error { return set(batch, e.k, e.v) }); err != nil {
			return err
		}
		return s.putSeqAndStep(batch, appKey, msgs, outcomes, seq, step, b)
	})
	if err != nil {
		s.createFailed(appKey, devs, step)
		return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
	}
	if step != nil {
		s.stepped.set(appKey, stepped(b, step))
	}
	s.cacheBatch(appKey, msgs, outcomes, encoded, pre, devs)
	locked = false
	unlock()
	if step == nil || seq != nil {
		if err := s.syncLazy(); err != nil {
			return nil, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
		}
	}
	return outcomes, nil
}

// batchEncoding returns msgs encoded for CreateMessages: as pre, a
// broadcast step's PrepareStep, encoded them, or encoded now.
func (s *Store) batchEncoding(appKey string, msgs []store.BatchMessage, pre *preparedStep) (encodedBatch, error) {
	if pre != nil {
		return encodedBatch{msgs: pre.encoded, now: pre.now}, nil
	}
	enc, err := s.encodeBatch(appKey, msgs)
	if err != nil {
		return enc, fmt.Errorf("create %d messages in %s: %w", len(msgs), appKey, err)
	}
	return enc, nil
}

// batchStripes returns the stripes CreateMessages holds: those of every
// device of msgs and of seq's seq_no.
func batchStripes(appKey string, msgs []store.BatchMessage, seq *store.BatchSeq) []int {
	idx := make([]int, 0, len(msgs)+1)
	for _, bm := range msgs {
		idx = append(idx, deviceStripe(appKey, bm.Message.DeviceName))
	}
	if seq != nil {
		idx = append(idx, seqStripe(appKey, seq.SeqNo))
	}
	return idx
}

// checkBatch makes CreateMessages' checks under its stripes: seq's seq_no
// is free (store.ErrSeqUsed), and step's broadcast is fanning out at the
// step's chunk (store.ErrVersionConflict). It returns the broadcast, as
// the step finds it (none without a step).
func (s *Store) checkBatch(appKey string, seq *store.BatchSeq, step *store.BroadcastStep) (store.Broadcast, error) {
	if seq != nil {
		if err := s.checkSeqFree(appKey, seq.SeqNo, &seq.Entry); err != nil {
			return store.Broadcast{}, err
		}
	}
	if step == nil {
		return store.Broadcast{}, nil
	}
	b, err := s.stepped.get(s, appKey, step.ID)
	if err != nil {
		return store.Broadcast{}, fmt.Errorf("broadcast %d: %w", step.ID, err)
	}
	if b.State != store.BroadcastFanningOut || b.Chunk != step.Chunk {
		return store.Broadcast{}, store.ErrVersionConflict
	}
	return b, nil
}

// batchFound reports whether every device of the batch may be taken to
// exist. Every device of the batch was found when the step's (or the
// batch send's) epoch was taken or after; with the epoch the same now,
// under their stripes, none was deleted since (see FlagEpoch).
func (s *Store) batchFound(seq *store.BatchSeq, step *store.BroadcastStep) bool {
	return step != nil && step.EpochOK && s.flagEpoch.Load() == step.Epoch ||
		step == nil && seq != nil && seq.EpochOK && s.flagEpoch.Load() == seq.Epoch
}

// createBatch returns the batch CreateMessages writes and whether it is
// prebuilt. A step whose every message is stored as it was prepared
// writes the batch PrepareStep filled with them; only the step is added
// here. Any other write starts an empty batch.
func (s *Store) createBatch(pre *preparedStep, outcomes []int) (batch *pebble.Batch, prebuilt bool) {
	batch = pre.takeBatch()
	if batch != nil && slices.ContainsFunc(outcomes, func(o int) bool { return o != store.BatchStored }) {
		batch.Close()
		batch = nil
	}
	if batch != nil {
		return batch, true
	}
	return s.db.NewBatch(), false
}

// addCreated goes through the messages CreateMessages stores: with
// gather, it appends to all the entries of each (its queue-full form,
// encoded here, for one whose device's queue is full), and with a step
// it takes each into b's Queued, FirstID and LastID. It returns all.
func addCreated(appKey string, msgs []store.BatchMessage, outcomes []int, encoded []encodedMsg, now int64, all []kv, gather bool, step *store.BroadcastStep, b *store.Broadcast) ([]kv, error) {
	for i, bm := range msgs {
		m := bm.Message
		if outcomes[i] == store.BatchGone {
			continue
		}
		kvs := encoded[i].stored
		if outcomes[i] == store.BatchFull {
			var err error
			if kvs, err = encodeForm(appKey, bm.Full, encoded[i].first, now, encoded[i].filter, nil, nil); err != nil {
				return all, err
			}
		}
		if gather {
			all = append(all, kvs...)
		}
		if step != nil {
			b.Queued++
			if b.FirstID == 0 || m.ID < b.FirstID {
				b.FirstID = m.ID
			}
			b.LastID = max(b.LastID, m.ID)
		}
	}
	return all, nil
}

// putSeqAndStep adds to batch CreateMessages' seq_no entry, with the body
// for the outcomes, and its step: the chunk's targets deleted and b, the
// broadcast with the messages taken in, moved past the chunk.
func (s *Store) putSeqAndStep(batch *pebble.Batch, appKey string, msgs []store.BatchMessage, outcomes []int, seq *store.BatchSeq, step *store.BroadcastStep, b store.Broadcast) error {
	if seq != nil {
		e := seq.Entry
		e.Body = seq.Body(msgs, outcomes)
		if err := putSeq(batch, appKey, seq.SeqNo, &e); err != nil {
			return err
		}
	}
	if step == nil {
		return nil
	}
	if err := batch.Delete(targetsKey(appKey, step.ID, step.Chunk), nil); err != nil {
		return err
	}
	return s.putBroadcast(batch, stepped(b, step))
}

// stepped returns b, the broadcast with a step's messages taken in, moved
// past the step's chunk, and done when the step ends the fan-out.
func stepped(b store.Broadcast, step *store.BroadcastStep) store.Broadcast {
	b.Chunk = step.Chunk + 1
	if step.Done {
		b.State = store.BroadcastDone
	}
	return b
}

// createFailed forgets, after a CreateMessages write failed, what the
// caches may hold wrong: the batch may or may not have landed.
func (s *Store) createFailed(appKey string, devs *batchDevices, step *store.BroadcastStep) {
	for _, d := range devs.queued() {
		s.pending.drop(appKey, d.name) // the batch may or may not have landed
	}
	if step != nil {
		s.stepped.forget() // under bcMu, as a step holds it
	}
}

// cacheBatch brings the caches up to a CreateMessages write that landed:
// the devices' pending counts and the messages. The counts of a
// broadcast's offline devices are dropped, not cached: nothing reads them
// soon (the next step of a broadcast reads its counts in PrepareStep),
// and a broadcast to 100,000 offline devices filled the cache with them.
func (s *Store) cacheBatch(appKey string, msgs []store.BatchMessage, outcomes []int, encoded []encodedMsg, pre *preparedStep, devs *batchDevices) {
	if pre != nil {
		var offline []string
		for i := range msgs {
			if d := devs.of(i); d != nil && d.added > 0 && !d.dropped && !pre.keep[i] {
				offline = append(offline, d.name)
				d.dropped = true
			}
		}
		s.pending.dropAll(appKey, offline)
	}
	queued := devs.queued()
	puts := make([]queuePut, 0, len(queued))
	for _, d := range queued {
		if !d.dropped {
			puts = append(puts, queuePut{app: appKey, name: d.name, n: d.count + d.added, added: d.ids})
		}
	}
	s.pending.putAll(puts)
	s.cacheCreated(appKey, msgs, outcomes, encoded, pre)
}

// eachInKeyOrder calls fn with a batch's entries ordered by their key's
// prefix letter, keeping the order within each (and so a later write of
// the same key after an earlier one). A batch is applied to the memtable
// in its order, and each insert first tries the skiplist position after
// the one before: a message's four keys under four prefixes in turn sent
// every insert searching from the top (a tenth of a broadcast's CPU).
// Grouped, the chunk's message, index and expiry keys follow each other
// in msgid order, and its queue keys in device order, as its targets
// are sorted: most inserts land next to the one before.
func eachInKeyOrder(kvs []kv, fn func(kv) error) error {
	// One pass over the entries for each prefix letter they use (five):
	// a stable comparison sort of a chunk's 500 entries took a third of
	// what it saved, and a counting sort into a copy allocated 48 bytes
	// an entry.
	var used [256]bool
	for _, e := range kvs {
		used[e.k[0]] = true
	}
	for p := range used {
		if !used[p] {
			continue
		}
		for _, e := range kvs {
			if int(e.k[0]) == p {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// syncLazy makes every write published so far durable, lazy ones
// included: Barrier's sync, whether or not a commit is in flight.
func (s *Store) syncLazy() error {
	lazy := s.lazyWrites.Load()
	if err := s.db.LogData(barrierRecord, pebble.Sync); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	s.markLazySynced(lazy)
	return nil
}

// batchDevice is one device of a CreateMessages call with pending
// messages in it.
type batchDevice struct {
	name   string
	exists bool
	count  int64 // pending before the batch
	added  int64 // messages the batch queues for it
	// ids are the msgids of those messages, in batch order.
	ids []int64
	// dropped says its pending count was dropped from the cache.
	dropped bool
}

// batchDevices is the devices of a CreateMessages call that have
// pending messages in it, each once.
type batchDevices struct {
	devs []batchDevice
	at   []int32 // msgs[i]'s device in devs, -1 when not pending
	// changed says some message is not stored as encoded (gone or
	// full), so the write cannot take encodedBatch.all as it is.
	changed bool
}

// of returns msgs[i]'s device, nil when msgs[i] is not pending.
func (b *batchDevices) of(i int) *batchDevice {
	if b.at[i] < 0 {
		return nil
	}
	return &b.devs[b.at[i]]
}

// queued returns the devices that gain queue entries.
func (b *batchDevices) queued() []*batchDevice {
	var out []*batchDevice
	for k := range b.devs {
		if b.devs[k].added > 0 {
			out = append(out, &b.devs[k])
		}
	}
	return out
}

// batchOutcomes decides, under the devices' stripes, what becomes of each
// message, and returns the devices with pending messages, their pending
// counts and what the batch queues for them. What the caches do not hold
// (whether a device exists, its pending count) is read in one pass over
// the devices and one over their queues (countQueues); with found, every
// device is known to exist, and a count pre read that still holds is
// not read again. The devices are kept in slices, one map naming them:
// a map and an object per device, and a map of msgid slices, were a
// tenth of the batch write.
func (s *Store) batchOutcomes(appKey string, msgs []store.BatchMessage, found bool, pre *preparedStep) ([]int, *batchDevices, error) {
	b := &batchDevices{devs: make([]batchDevice, 0, len(msgs)), at: make([]int32, len(msgs))}
	slot := make(map[string]int32, len(msgs))
	var devKeys [][]byte
	var devAt, countAt []int32
	var countNames []string
	for i, bm := range msgs {
		name := bm.Message.DeviceName
		if bm.Message.State != store.StatePending {
			b.at[i] = -1
			continue
		}
		k, ok := slot[name]
		if ok {
			b.at[i] = k
			continue
		}
		k = int32(len(b.devs))
		slot[name], b.at[i] = k, k
		b.devs = append(b.devs, batchDevice{name: name})
		d := &b.devs[k]
		if found {
			d.exists = true
		} else if _, ok := s.devices.get(appKey, name); ok {
			d.exists = true
		} else {
			devKeys, devAt = append(devKeys, key(pDevice, appKey, name)), append(devAt, k)
		}
		if c, ok := pre.count(s, appKey, name); ok {
			d.count = c
		} else if c, ok := s.pending.get(appKey, name); ok {
			d.count = c
		} else {
			countNames, countAt = append(countNames, name), append(countAt, k)
		}
	}
	err := s.seekEach(key(pDevice, appKey, ""), devKeys, func(i int, _ []byte) error {
		b.devs[devAt[i]].exists = true
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create %d messages: %w", len(msgs), err)
	}
	// Counted under the stripes, so the counts are cached (learn); those
	// of devices that turn out not to exist are not.
	err = s.countQueues(appKey, countNames, func(i int, n int64) {
		d := &b.devs[countAt[i]]
		d.count = n
		if d.exists {
			s.pending.learn(appKey, d.name, n)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create %d messages: %w", len(msgs), err)
	}
	outcomes := make([]int, len(msgs))
	queued := 0
	for i := range msgs {
		d := b.of(i)
		switch {
		case d == nil:
		case !d.exists:
			outcomes[i], b.changed = store.BatchGone, true
		case d.count+d.added >= store.MaxPending:
			outcomes[i], b.changed = store.BatchFull, true
		default:
			d.added++
			queued++
		}
	}
	// The msgids queued, each device's in a run of one slice.
	ids, off := make([]int64, queued), 0
	for k := range b.devs {
		d := &b.devs[k]
		d.ids = ids[off : off : off+int(d.added)]
		off += int(d.added)
	}
	for i, bm := range msgs {
		if d := b.of(i); d != nil && outcomes[i] == store.BatchStored {
			d.ids = append(d.ids, bm.Message.ID)
		}
	}
	return outcomes, b, nil
}

// kv is one key and value of a write.
type kv struct{ k, v []byte }

// encodedMsg is one message of a batch encoded for its write.
type encodedMsg struct {
	// stored is the message in its stored form with its index entries,
	// its queue and expiry entries when pending and its records' outbox
	// entries.
	stored []kv
	// first is the first outbox Seq the message holds; its queue-full
	// form, encoded only when it is the one stored (seldom), uses the
	// same Seqs.
	first int64
	// filter is the records the outbox keeps, for both forms.
	filter recordFilter
}

// encodedBatch is a batch's messages encoded for its write.
type encodedBatch struct {
	msgs []encodedMsg
	// all is every message's stored entries, in message order: the
	// msgs[i].stored share it, one allocation for the batch where there
	// was one a message, and a write that stores every message as
	// encoded adds all without gathering them again.
	all []kv
	now int64 // Unix ms, the time of the outbox entries
}

// encodeBatch encodes each message of a batch as stored (encodedMsg),
// taking outbox Seqs for the larger of its two forms.
func (s *Store) encodeBatch(appKey string, msgs []store.BatchMessage) (encodedBatch, error) {
	e := encodedBatch{msgs: make([]encodedMsg, len(msgs)), now: s.now().UnixMilli()}
	f := s.recordFilter(appKey)
	n := 0
	for _, bm := range msgs {
		n += 4 + f.kept(bm.Message.Records) // encodeForm's most
	}
	e.all = make([]kv, 0, n)
	var memo rawMemo
	for i, bm := range msgs {
		n := int64(max(f.kept(bm.Message.Records), f.kept(bm.Full.Records)))
		out := &e.msgs[i]
		out.first, out.filter = s.outboxSeq.Add(n)-n+1, f
		start := len(e.all)
		var err error
		if e.all, err = encodeForm(appKey, bm.Message, out.first, e.now, f, &memo, e.all); err != nil {
			return encodedBatch{}, err
		}
		out.stored = e.all[start:len(e.all):len(e.all)]
	}
	return e, nil
}

// encodeForm appends to kvs m's entries as encodedMsg.stored describes
// them, at most 4 and an outbox entry for each record f keeps, numbered
// from first and timed now (Unix ms).
func encodeForm(appKey string, m store.Message, first, now int64, f recordFilter, memo *rawMemo, kvs []kv) ([]kv, error) {
	m.AppKey = appKey
	kept := f.kept(m.Records)
	if kvs == nil {
		kvs = make([]kv, 0, 4+kept)
	}
	// One buffer holds the keys, the message and its outbox entries
	// (each about 250 bytes and the params), so encoding them makes one
	// allocation, not one per key, per value and per growth; it was sized
	// for an entry per record whether the outbox kept it or not, three
	// times what a message without callbacks needs.
	keys := 2*len(appKey) + len(m.DeviceName) + 48
	buf := make([]byte, 0, keys+(1+kept)*(320+len(m.Params)+len(appKey)+len(m.DeviceName)+len(m.CallbackURL))+len(m.Body))
	if m.State == store.StatePending {
		start := len(buf)
		buf = appendQueueKey(buf, appKey, m.DeviceName, m.ID)
		q := buf[start:len(buf):len(buf)]
		start = len(buf)
		buf = appendExpiryKey(buf, m.ExpireTime, m.ID)
		kvs = append(kvs, kv{q, nil}, kv{buf[start:len(buf):len(buf)], nil})
	}
	start := len(buf)
	buf = appendMsgKey(buf, m.ID)
	mk := buf[start:len(buf):len(buf)]
	start = len(buf)
	buf = appendAppMsgKey(buf, appKey, m.ID)
	ak := buf[start:len(buf):len(buf)]
	start = len(buf)
	buf, err := appendMessageWith(buf, &m, memo)
	if err != nil {
		return nil, fmt.Errorf("encode message %d: %w", m.ID, err)
	}
	kvs = append(kvs, kv{mk, buf[start:len(buf):len(buf)]}, kv{ak, nil})
	seq := first
	for r := range m.Records {
		if !f.keeps(m.Records[r].Type) {
			continue
		}
		e := outboxEntry(&m, r, seq, now)
		start := len(buf)
		if buf, err = appendOutboxEntryWith(buf, &e, memo); err != nil {
			return nil, fmt.Errorf("encode outbox entry %s: %w", e.ID, err)
		}
		kvs = append(kvs, kv{outboxKey(e.Seq), buf[start:len(buf):len(buf)]})
		seq++
	}
	return kvs, nil
}
