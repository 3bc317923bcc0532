package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Messages.

// CreateMessage stores m, queues it if pending and records seq, in one
// synced batch; see store.Store for the errors, which are checked in the
// order ErrSeqUsed, ErrQueueFull.
func (s *Store) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	defer s.lockDeviceAndSeq(m.AppKey, m.DeviceName, seqNo, seq != nil)()
	if err := s.checkSeqFree(m.AppKey, seqNo, seq); err != nil {
		return err
	}
	var count int64
	if m.State == store.StatePending {
		// Under the device's lock, so a DeleteDevice cannot leave a queue
		// entry behind for a later device of the same name.
		if _, ok := s.devices.get(m.AppKey, m.DeviceName); !ok {
			if found, err := s.exists(key(pDevice, m.AppKey, m.DeviceName)); err != nil {
				return fmt.Errorf("create message %d: %w", m.ID, err)
			} else if !found {
				return store.ErrNotFound
			}
		}
		var err error
		if count, err = s.pendingCount(m.AppKey, m.DeviceName); err != nil {
			return fmt.Errorf("create message %d: %w", m.ID, err)
		}
		if count >= store.MaxPending {
			return store.ErrQueueFull
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("create message %d: encode: %w", m.ID, err)
	}
	err = s.write(func(b *pebble.Batch) error {
		if m.State == store.StatePending {
			if err := set(b, queueKey(m.AppKey, m.DeviceName, m.ID), nil); err != nil {
				return err
			}
			if err := set(b, expiryKey(m.ExpireTime, m.ID), nil); err != nil {
				return err
			}
		}
		if err := set(b, msgKey(m.ID), raw); err != nil {
			return err
		}
		if err := set(b, appMsgKey(m.AppKey, m.ID), nil); err != nil {
			return err
		}
		if err := s.addOutbox(b, m, 0); err != nil {
			return err
		}
		return putSeq(b, m.AppKey, seqNo, seq)
	})
	if err != nil {
		s.pending.drop(m.AppKey, m.DeviceName) // the batch may or may not have landed
		s.msgs.drop(m.ID)
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	s.msgs.keep(m.ID, raw, cloneMessage(m))
	if m.State == store.StatePending {
		s.pending.put(m.AppKey, m.DeviceName, count+1, []int64{m.ID}, nil)
	}
	return nil
}

// GetMessage returns the app's message or store.ErrNotFound, also when the
// id belongs to another app.
func (s *Store) GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.exit()
	var m store.Message
	if err := s.getJSON(msgKey(id), &m); err != nil {
		return store.Message{}, err
	}
	if m.AppKey != appKey {
		return store.Message{}, store.ErrNotFound
	}
	return m, nil
}

// PendingMessages returns up to limit of the device's pending messages in
// msgid order, which is send order.
func (s *Store) PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var out []store.Message
	prefix := key(pQueue, appKey, deviceName, "")
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		id := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		var m store.Message
		if err := s.getJSON(msgKey(id), &m); errors.Is(err, store.ErrNotFound) {
			return false, fmt.Errorf("queue entry %q names missing message %d", k, id)
		} else if err != nil {
			return false, err
		}
		out = append(out, m)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending messages of %s/%s: %w", appKey, deviceName, err)
	}
	return out, nil
}

// ListMessages returns up to limit of the app's messages with ids below
// before (0: from the newest), newest first, walking the app's index
// backwards.
func (s *Store) ListMessages(ctx context.Context, appKey string, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	prefix := key(pAppMsg, appKey, "")
	upper := prefixEnd(prefix)
	if before > 0 {
		upper = appMsgKey(appKey, before)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("messages of %s: %w", appKey, err)
	}
	defer it.Close()
	var out []store.Message
	for ok := it.Last(); ok && len(out) < limit; ok = it.Prev() {
		id := int64(binary.BigEndian.Uint64(it.Key()[len(prefix):]))
		var m store.Message
		if err := s.getJSON(msgKey(id), &m); errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("messages of %s: index names missing message %d", appKey, id)
		} else if err != nil {
			return nil, fmt.Errorf("messages of %s: %w", appKey, err)
		}
		out = append(out, m)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("messages of %s: %w", appKey, err)
	}
	return out, nil
}

// LastMessageID returns the highest msgid stored (message keys sort by id).
func (s *Store) LastMessageID(ctx context.Context) (int64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	k, err := s.lastKey(pMsg)
	if err != nil || k == nil {
		return 0, err
	}
	if len(k) != len(pMsg)+8 {
		return 0, fmt.Errorf("last message id: malformed key %q", k)
	}
	return int64(binary.BigEndian.Uint64(k[len(pMsg):])), nil
}

// addOutbox adds m's records from index from on to the outbox in b,
// those its app's settings keep (recordFilter).
func (s *Store) addOutbox(b *pebble.Batch, m store.Message, from int) error {
	if from >= len(m.Records) {
		return nil
	}
	f := s.recordFilter(m.AppKey)
	for i := from; i < len(m.Records); i++ {
		if !f.keeps(m.Records[i].Type) {
			continue
		}
		e := outboxEntry(&m, i, s.outboxSeq.Add(1), s.now().UnixMilli())
		if err := setJSON(b, outboxKey(e.Seq), e); err != nil {
			return err
		}
	}
	return nil
}

// outboxEntry is record r of m as outbox entry seq, made at now (Unix
// ms): the one place the outbox's entries are made (addOutbox,
// planUpdates, encodeForm).
func outboxEntry(m *store.Message, r int, seq, now int64) store.OutboxEntry {
	return store.OutboxEntry{
		Seq:         seq,
		ID:          store.RecordID(m.ID, r),
		AppKey:      m.AppKey,
		CallbackURL: m.CallbackURL,
		Time:        now,
		Record:      m.Filled(m.Records[r]),
	}
}

// UpdateMessage applies fn to the message under its device's lock; see
// store.Store.
func (s *Store) UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.exit()
	m, _, _, err := s.readMessage(id, false)
	if err != nil {
		return store.Message{}, err
	}
	if m.AppKey != appKey {
		return store.Message{}, store.ErrNotFound
	}
	dev := m.DeviceName
	defer s.lock2(deviceStripe(appKey, dev), deviceStripe(appKey, dev))()
	// Read again under the lock: the first read only named the device.
	// The cached state goes whatever the write's outcome (msgcache.go).
	if m, _, _, err = s.readMessage(id, true); err != nil {
		return store.Message{}, err
	}
	defer s.msgs.drop(id) // runs before the stripe's unlock
	before := m
	n, leaving, err := store.ApplyUpdate(&m, id, appKey, fn)
	if err != nil {
		return store.Message{}, err
	}
	var count int64
	if leaving {
		if count, err = s.pendingCount(appKey, dev); err != nil {
			return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
		}
	}
	err = s.write(func(b *pebble.Batch) error {
		if leaving {
			if err := unqueue(b, before); err != nil {
				return err
			}
		}
		if err := setJSON(b, msgKey(id), m); err != nil {
			return err
		}
		return s.addOutbox(b, m, n)
	})
	if err != nil {
		s.pending.drop(appKey, dev)
		return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
	}
	if leaving {
		s.pending.put(appKey, dev, max(count-1, 0), nil, []int64{id})
	}
	return m, nil
}

// ExpiredMessages returns pending messages that expired before before.
func (s *Store) ExpiredMessages(ctx context.Context, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var out []store.Message
	upper := binary.BigEndian.AppendUint64([]byte(pExpiry), uint64(max(before, 0)))
	err := s.scan([]byte(pExpiry), upper, func(k, _ []byte) (bool, error) {
		id := int64(binary.BigEndian.Uint64(k[len(pExpiry)+8:]))
		var m store.Message
		if err := s.getJSON(msgKey(id), &m); err != nil {
			return false, err
		}
		out = append(out, m)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("expired messages: %w", err)
	}
	return out, nil
}
