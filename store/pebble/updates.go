package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

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
	raw []byte // the stored value read before the stripes were taken
	m   store.Message
}

// UpdateMessages applies the updates in one batch, holding the stripes of
// every device they touch only while the batch is applied, and waits for
// its fsync after releasing them: PUBACKs are stored many at a time, at
// one commit and one fsync for all of them, while sends to the same
// devices go on. A write that read one of these messages under its stripe
// is after the batch in the WAL, so no crash keeps that write without the
// batch. See store.Store.
func (s *Store) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	errs := make([]error, len(updates))
	// Read and decode every message before any lock is taken: the read
	// names the device, so the stripe. Under the stripes the stored bytes
	// are read again and decoded again only if they changed meanwhile.
	msgs := make(map[int64]*updating, len(updates))
	idx := make([]int, 0, len(updates))
	for i, u := range updates {
		if _, ok := msgs[u.ID]; ok {
			continue
		}
		raw, err := s.get(msgKey(u.ID))
		if err != nil {
			errs[i] = err
			continue
		}
		e := &updating{raw: raw}
		if err := json.Unmarshal(raw, &e.m); err != nil {
			errs[i] = fmt.Errorf("decode message %d: %w", u.ID, err)
			continue
		}
		msgs[u.ID] = e
		idx = append(idx, deviceStripe(e.m.AppKey, e.m.DeviceName))
	}
	unlock := s.lockStripes(idx)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	for id, e := range msgs {
		raw, err := s.get(msgKey(id))
		if errors.Is(err, store.ErrNotFound) {
			delete(msgs, id) // its updates are ErrNotFound below
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update message %d: %w", id, err)
		}
		if !bytes.Equal(raw, e.raw) {
			e.m = store.Message{}
			if err := json.Unmarshal(raw, &e.m); err != nil {
				return nil, fmt.Errorf("decode message %d: %w", id, err)
			}
		}
	}
	type change struct {
		m       store.Message
		records int // records the message had before the call
	}
	changed := map[int64]*change{}
	var order []int64 // changed ids in first-change order
	var done []int    // updates applied
	counts := map[[2]string]int64{}
	removed := map[[2]string][]int64{}
	var leaving []store.Message // messages that leave their queue, as stored before
	for i, u := range updates {
		if errs[i] != nil {
			continue
		}
		e, ok := msgs[u.ID]
		if !ok || e.m.AppKey != u.AppKey {
			errs[i] = store.ErrNotFound
			continue
		}
		c := changed[u.ID]
		cur := e.m
		if c != nil {
			cur = c.m
		}
		// fn works on its own copy of the records, so a failing fn
		// leaves cur as it was.
		next := cur
		next.Records = append([]store.Record(nil), cur.Records...)
		_, out, err := store.ApplyUpdate(&next, u.ID, u.AppKey, u.Fn)
		if err != nil {
			errs[i] = err
			continue
		}
		if c == nil {
			c = &change{records: len(e.m.Records)}
			changed[u.ID] = c
			order = append(order, u.ID)
		}
		c.m = next
		done = append(done, i)
		if out {
			dk := [2]string{u.AppKey, next.DeviceName}
			if _, ok := counts[dk]; !ok {
				n, ok := s.pending.get(u.AppKey, next.DeviceName)
				if !ok {
					if n, err = s.count(key(pCount, u.AppKey, next.DeviceName)); err != nil {
						return nil, fmt.Errorf("update message %d: %w", u.ID, err)
					}
				}
				counts[dk] = n
			}
			counts[dk] = max(counts[dk]-1, 0)
			removed[dk] = append(removed[dk], u.ID)
			leaving = append(leaving, cur)
		}
	}
	if len(order) == 0 {
		return errs, nil
	}
	synced, err := s.writeSyncAfter(func(b *pebble.Batch) error {
		for _, m := range leaving {
			if err := b.Delete(queueKey(m.AppKey, m.DeviceName, m.ID), nil); err != nil {
				return err
			}
			if err := b.Delete(expiryKey(m.ExpireTime, m.ID), nil); err != nil {
				return err
			}
		}
		for dk, n := range counts {
			if err := set(b, key(pCount, dk[0], dk[1]), be64(n)); err != nil {
				return err
			}
		}
		for _, id := range order {
			c := changed[id]
			if err := setJSON(b, msgKey(id), c.m); err != nil {
				return err
			}
			if err := s.addOutbox(b, c.m, c.records); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for dk := range counts {
			s.pending.drop(dk[0], dk[1]) // the batch may or may not have landed
		}
		err = fmt.Errorf("update %d messages: %w", len(order), err)
		for _, i := range done {
			errs[i] = err
		}
		return errs, nil
	}
	for dk, n := range counts {
		s.pending.put(dk[0], dk[1], n, nil, removed[dk])
	}
	locked = false
	unlock()
	if err := synced(); err != nil {
		err = fmt.Errorf("update %d messages: %w", len(order), err)
		for _, i := range done {
			errs[i] = err
		}
	}
	return errs, nil
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
