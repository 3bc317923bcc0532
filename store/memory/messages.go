package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/store"
)

// CreateMessage stores m, queues it if pending and records seq; see
// store.Store for the errors, which are checked in the order ErrSeqUsed,
// ErrNotFound, ErrQueueFull.
func (s *Store) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	stored, err := clone(m)
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	entries, err := outboxEntries(stored, 0)
	if err != nil {
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.seqUsed(m.AppKey, seqNo, seq) {
		return store.ErrSeqUsed
	}
	if m.State == store.StatePending {
		k := devKey{m.AppKey, m.DeviceName}
		if _, ok := s.devices[k]; !ok {
			return store.ErrNotFound
		}
		if len(s.queues[k]) >= store.MaxPending {
			return store.ErrQueueFull
		}
		s.queues[k] = insertSorted(s.queues[k], m.ID)
		s.pending[m.ID] = true
	}
	s.msgs[m.ID] = stored
	s.appMsgs[m.AppKey] = insertSorted(s.appMsgs[m.AppKey], m.ID)
	s.lastID = max(s.lastID, m.ID)
	s.addOutbox(entries)
	s.putSeq(m.AppKey, seqNo, seq)
	return nil
}

// GetMessage returns the app's message or store.ErrNotFound, also when the
// id belongs to another app.
func (s *Store) GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error) {
	if err := s.lock(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.mu.Unlock()
	m, ok := s.msgs[id]
	if !ok || m.AppKey != appKey {
		return store.Message{}, store.ErrNotFound
	}
	return clone(m)
}

// LastMessageID returns the highest message id stored, 0 when there is
// none (or when every id is negative, which the service never issues).
func (s *Store) LastMessageID(ctx context.Context) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.lastID, nil
}

// PendingMessages returns up to limit of the device's pending messages in
// msgid order, which is send order.
func (s *Store) PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.queues[devKey{appKey, deviceName}]
	return s.messages(ids[:min(limit, len(ids))])
}

// ListMessages returns up to limit of the app's messages with ids below
// before (0: from the newest), newest first.
func (s *Store) ListMessages(ctx context.Context, appKey string, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.appMsgs[appKey]
	if before > 0 {
		end, _ := slices.BinarySearch(ids, before)
		ids = ids[:end]
	}
	ids = slices.Clone(ids[max(len(ids)-limit, 0):])
	slices.Reverse(ids)
	return s.messages(ids)
}

// UpdateMessage applies fn to a copy of the app's message and stores the
// result; see store.Store.
func (s *Store) UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error) {
	if err := s.lock(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.mu.Unlock()
	cur, ok := s.msgs[id]
	if !ok || cur.AppKey != appKey {
		return store.Message{}, store.ErrNotFound
	}
	m, err := clone(cur)
	if err != nil {
		return store.Message{}, err
	}
	n, leaving, err := store.ApplyUpdate(&m, id, appKey, fn)
	if err != nil {
		return store.Message{}, err
	}
	stored, err := clone(m)
	if err != nil {
		return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
	}
	entries, err := outboxEntries(stored, n)
	if err != nil {
		return store.Message{}, fmt.Errorf("update message %d: %w", id, err)
	}
	if leaving {
		k := devKey{appKey, m.DeviceName}
		if q := removeSorted(s.queues[k], id); len(q) > 0 {
			s.queues[k] = q
		} else {
			delete(s.queues, k)
		}
		delete(s.pending, id)
	}
	s.msgs[id] = stored
	s.addOutbox(entries)
	return m, nil
}

// ExpiredMessages returns up to limit pending messages whose ExpireTime is
// before before, earliest first (by id among equal times).
func (s *Store) ExpiredMessages(ctx context.Context, before int64, limit int) ([]store.Message, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var ids []int64
	for id := range s.pending {
		if s.msgs[id].ExpireTime < before {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int64) int {
		return cmp.Or(cmp.Compare(s.msgs[a].ExpireTime, s.msgs[b].ExpireTime), cmp.Compare(a, b))
	})
	return s.messages(ids[:min(limit, len(ids))])
}

// messages returns copies of the stored messages with the ids.
func (s *Store) messages(ids []int64) ([]store.Message, error) {
	var out []store.Message
	for _, id := range ids {
		m, err := clone(s.msgs[id])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// outboxEntries returns the outbox entries of m's records from index
// from on, without their Seqs (addOutbox hands those out).
func outboxEntries(m store.Message, from int) ([]store.OutboxEntry, error) {
	var out []store.OutboxEntry
	for i := from; i < len(m.Records); i++ {
		e, err := clone(store.OutboxEntry{
			ID:          store.RecordID(m.ID, i),
			AppKey:      m.AppKey,
			CallbackURL: m.CallbackURL,
			Record:      m.Filled(m.Records[i]),
		})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// addOutbox adds the entries to the outbox with new Seqs and the time.
func (s *Store) addOutbox(entries []store.OutboxEntry) {
	now := s.now().UnixMilli()
	for _, e := range entries {
		s.lastSeq++
		e.Seq, e.Time = s.lastSeq, now
		s.outbox[e.Seq] = e
	}
}

// PendingIDs returns the ids of up to limit of the device's pending
// messages in send order.
func (s *Store) PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.queues[devKey{appKey, deviceName}]
	return slices.Clone(ids[:min(limit, len(ids))]), nil
}

// UpdateMessages applies the updates one by one; see store.Store.
func (s *Store) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	return store.UpdateOneByOne(ctx, s.UpdateMessage, updates)
}
