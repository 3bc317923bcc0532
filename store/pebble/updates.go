package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// PendingIDs returns the ids of up to limit of the device's pending
// messages in msgid order, which is send order, from the queue keys
// alone (no message is read), or from memory when the queue has not
// changed since it was last read (see pendingCache).
func (s *Store) PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	ids, ok, gen := s.pending.cachedIDs(appKey, deviceName, limit)
	if ok {
		return ids, nil
	}
	// Read ahead, so that the PUBACKs taking messages off the queue's
	// head leave enough cached for the next calls.
	read := limit * readAhead
	var out []int64
	prefix := key(pQueue, appKey, deviceName, "")
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		out = append(out, int64(binary.BigEndian.Uint64(k[len(prefix):])))
		return len(out) < read, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending messages of %s/%s: %w", appKey, deviceName, err)
	}
	s.pending.storeIDs(appKey, deviceName, gen, out, read)
	return out[:min(limit, len(out))], nil
}

// updating is one message of an UpdateMessages call as it goes along.
type updating struct {
	id  int64
	raw []byte     // the stored value read before the stripes were taken
	e   *cachedMsg // the cache entry it came from, if it did
	// m is raw decoded, shared with the cache entry if there is one:
	// not to be changed.
	m store.Message
	// lost says the message was not found under the stripe: its
	// updates are ErrNotFound.
	lost bool
}

// UpdateMessages applies the updates in one batch, holding the stripes of
// every device they touch only while the batch is applied, and waits for
// its fsync after releasing them: PUBACKs are stored many at a time, at
// one commit and one fsync for all of them, while sends to the same
// devices go on. A write that read one of these messages under its stripe
// is after the batch in the WAL, so no crash keeps that write without the
// batch. See store.Store.
//
// The messages are read, updated and encoded before the stripes are
// taken; under them each is read again, and only if one changed
// meanwhile are the updates applied and encoded again there. A batch send
// takes the stripes of up to 1000 devices, so every stripe an ack write
// holds while it encodes held up the sends: in fan-out they spent a
// third of their time waiting for stripes. An Fn may therefore run twice.
func (s *Store) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	errs := make([]error, len(updates))
	msgs, all, idx := s.readUpdating(updates, errs)
	p, err := s.planUpdates(updates, msgs, all, errs)
	if err != nil {
		return nil, err
	}
	unlock := s.lockStripes(idx)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	stale, err := s.rereadUpdating(all)
	if err != nil {
		return nil, err
	}
	if stale {
		if p, err = s.planUpdates(updates, msgs, all, errs); err != nil {
			return nil, err
		}
	}
	errs = p.errs
	if len(p.kvs) == 0 {
		return errs, nil
	}
	counts, err := s.leavingCounts(p)
	if err != nil {
		return nil, err
	}
	synced, err := s.writeSyncAfter(func(b *pebble.Batch) error {
		return fillUpdates(b, p.leaving, p.kvs)
	})
	if err != nil {
		for dk := range counts {
			s.pending.drop(dk[0], dk[1]) // the batch may or may not have landed
		}
		for _, id := range p.order {
			s.msgs.drop(id)
		}
		p.fail(errs, fmt.Errorf("update %d messages: %w", len(p.order), err))
		return errs, nil
	}
	s.cacheUpdates(p, counts)
	locked = false
	unlock()
	if err := synced(); err != nil {
		p.fail(errs, fmt.Errorf("update %d messages: %w", len(p.order), err))
	}
	return errs, nil
}

// readUpdating reads and decodes every message of updates, each once,
// before any lock is taken: the read names the device, so the stripe. It
// returns the messages read (all, indexed by msgid in msgs) and their
// devices' stripes; a read's error goes into errs at its update.
func (s *Store) readUpdating(updates []store.MessageUpdate, errs []error) (msgs map[int64]int, all []updating, idx []int) {
	msgs = make(map[int64]int, len(updates)) // msgid -> index in all
	all = make([]updating, 0, len(updates))
	idx = make([]int, 0, len(updates))
	for i, u := range updates {
		if _, ok := msgs[u.ID]; ok {
			continue
		}
		m, raw, ce, err := s.readMessageShared(u.ID, false)
		if err != nil {
			errs[i] = err
			continue
		}
		msgs[u.ID] = len(all)
		all = append(all, updating{id: u.ID, raw: raw, e: ce, m: m})
		idx = append(idx, deviceStripe(m.AppKey, m.DeviceName))
	}
	return msgs, all, idx
}

// rereadUpdating reads again, under their stripes, the messages of all
// that the cache no longer holds as they were read, and reports whether
// one changed (or is gone) meanwhile: then the updates are planned again.
func (s *Store) rereadUpdating(all []updating) (stale bool, err error) {
	for i := range all {
		e := &all[i]
		id := e.id
		if ce := s.msgs.get(id); ce != nil && ce == e.e {
			if verifyMsgCache && !s.msgs.noVerify {
				s.verifyCached(id, ce)
			}
			continue // as read: the cache holds what Pebble does
		}
		m, raw, ce, err := s.readMessageShared(id, true)
		if errors.Is(err, store.ErrNotFound) {
			e.lost = true // its updates are ErrNotFound below
			stale = true
			continue
		}
		if err != nil {
			return false, fmt.Errorf("update message %d: %w", id, err)
		}
		e.e = ce
		if !bytes.Equal(raw, e.raw) {
			stale = true
			e.m, e.raw = m, raw
		}
	}
	return stale, nil
}

// leavingCounts returns the pending count each device of p.removed will
// have once p is written.
func (s *Store) leavingCounts(p *updatePlan) (map[[2]string]int64, error) {
	counts := make(map[[2]string]int64, len(p.removed))
	for dk, ids := range p.removed {
		n, err := s.pendingCount(dk[0], dk[1])
		if err != nil {
			return nil, fmt.Errorf("update message %d: %w", ids[0], err)
		}
		counts[dk] = max(n-int64(len(ids)), 0)
	}
	return counts, nil
}

// cacheUpdates brings the caches up to p, written: the pending counts of
// the devices whose messages left their queue, and the messages.
func (s *Store) cacheUpdates(p *updatePlan, counts map[[2]string]int64) {
	puts := make([]queuePut, 0, len(counts))
	for dk, n := range counts {
		puts = append(puts, queuePut{app: dk[0], name: dk[1], n: n, removed: p.removed[dk]})
	}
	s.pending.putAll(puts)
	kept := make([]keeping, len(p.order))
	for i, id := range p.order {
		kept[i] = keeping{id: id, raw: p.stored[i].raw, m: p.stored[i].m}
	}
	s.msgs.keepAll(kept)
}

// fail sets err, the write's, as the error of every update p applied.
func (p *updatePlan) fail(errs []error, err error) {
	for _, i := range p.done {
		errs[i] = err
	}
}

// updatePlan is what UpdateMessages writes: the updates applied to the
// messages as read, encoded.
type updatePlan struct {
	errs    []error               // per update, the read errors included
	done    []int                 // updates applied
	order   []int64               // changed msgids in first-change order
	leaving []store.Message       // messages that leave their queue, as stored before
	removed map[[2]string][]int64 // the msgids leaving each device's queue
	kvs     []kv                  // the changed messages and their outbox entries, each key once
	stored  []cachedMsg           // the changed messages as written, in order's order
}

// planUpdates applies updates to the messages as read (all, indexed by
// msgid in msgs; errs holds the errors of the reads) and encodes the
// result. Neither msgs nor all is changed.
func (s *Store) planUpdates(updates []store.MessageUpdate, msgs map[int64]int, all []updating, readErrs []error) (*updatePlan, error) {
	type change struct {
		m       store.Message
		records int // records the message had before the call
		e       *updating
	}
	p := &updatePlan{
		errs:    slices.Clone(readErrs),
		done:    make([]int, 0, len(updates)),
		order:   make([]int64, 0, len(msgs)),
		removed: make(map[[2]string][]int64, len(all)),
		kvs:     make([]kv, 0, 2*len(msgs)),
		stored:  make([]cachedMsg, 0, len(msgs)),
	}
	changes := make([]change, 0, len(all))
	changed := make([]int32, len(all)) // by index in all: 1 + index in changes, 0 if unchanged
	work := new(store.Message)
	for i, u := range updates {
		if p.errs[i] != nil {
			continue
		}
		at, ok := msgs[u.ID]
		if !ok || all[at].lost || all[at].m.AppKey != u.AppKey {
			p.errs[i] = store.ErrNotFound
			continue
		}
		e := &all[at]
		var c *change
		cur := e.m
		if changed[at] > 0 {
			c = &changes[changed[at]-1]
			cur = c.m
		}
		// fn works on its own copy of the records (their errors
		// included), so a failing fn leaves cur as it was and the
		// cache entry cur may share is never changed; the copy has
		// room for the record an update adds. The message fn gets
		// escapes to the heap: one for the whole call (an Fn does
		// not keep it past its return).
		*work = cur
		work.Records = copyRecords(cur.Records, 1)
		_, out, err := store.ApplyUpdate(work, u.ID, u.AppKey, u.Fn)
		if err != nil {
			p.errs[i] = err
			continue
		}
		next := *work
		if c == nil {
			changes = append(changes, change{records: len(e.m.Records), e: e})
			changed[at] = int32(len(changes))
			c = &changes[len(changes)-1]
			p.order = append(p.order, u.ID)
		}
		c.m = next
		p.done = append(p.done, i)
		if out {
			dk := [2]string{u.AppKey, next.DeviceName}
			p.removed[dk] = append(p.removed[dk], u.ID)
			p.leaving = append(p.leaving, cur)
		}
	}
	now := s.now().UnixMilli()
	filters := map[string]recordFilter{}
	keys := make([]byte, 0, len(p.order)*(len(pMsg)+8)) // the message keys, one allocation
	for i, id := range p.order {
		c := &changes[i]
		// A message read from the cache is stored as appendMessage
		// encoded it; the common change (a PUBACK's) is spliced in.
		e := c.e
		data, ok := []byte(nil), false
		if e.e != nil {
			data, ok = spliceMessage(e.raw, &e.m, &c.m)
		}
		if !ok {
			var err error
			if data, err = appendMessage(nil, &c.m); err != nil {
				return nil, fmt.Errorf("encode message %d: %w", id, err)
			}
		}
		k := len(keys)
		keys = appendMsgKey(keys, id)
		p.kvs = append(p.kvs, kv{keys[k:len(keys):len(keys)], data})
		p.stored = append(p.stored, cachedMsg{raw: data, m: c.m})
		f, ok := filters[c.m.AppKey]
		if !ok && c.records < len(c.m.Records) {
			f = s.recordFilter(c.m.AppKey)
			filters[c.m.AppKey] = f
		}
		for r := c.records; r < len(c.m.Records); r++ {
			if !f.keeps(c.m.Records[r].Type) {
				continue
			}
			oe := outboxEntry(&c.m, r, s.outboxSeq.Add(1), now)
			data, err := appendOutboxEntry(nil, &oe)
			if err != nil {
				return nil, fmt.Errorf("encode outbox entry %s: %w", oe.ID, err)
			}
			p.kvs = append(p.kvs, kv{outboxKey(oe.Seq), data})
		}
	}
	return p, nil
}

// writeSyncAfter commits fill's batch synced but returns once the batch is
// applied (visible to readers), with the function that waits for its
// fsync: a caller holding stripes releases them in between. The commit is
// counted in committing until that wait ends, so a Barrier that could see
// it syncs first, as for write. One WAL record, where writeLazy and a
// separate sync take two.
func (s *Store) writeSyncAfter(fill func(b *pebble.Batch) error) (synced func() error, err error) {
	b := s.db.NewBatch()
	if err := fill(b); err != nil {
		b.Close()
		return nil, err
	}
	s.committing.Add(1)
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		s.committing.Add(-1)
		b.Close()
		return nil, fmt.Errorf("commit: %w", err)
	}
	return func() error {
		defer b.Close()
		defer s.committing.Add(-1)
		if err := b.SyncWait(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}, nil
}
