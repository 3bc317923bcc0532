package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/store"
)

// tagKey names one tag of one app in the tag index.
type tagKey struct{ app, tag string }

// indexTagsLocked moves name's entries in the app's tag index from the
// tags old to the tags now; s.mu is held.
func (s *Store) indexTagsLocked(app, name string, old, now []string) {
	for _, t := range old {
		if !slices.Contains(now, t) {
			k := tagKey{app, t}
			if s.tagged[k] = removeSorted(s.tagged[k], name); len(s.tagged[k]) == 0 {
				delete(s.tagged, k)
			}
		}
	}
	for _, t := range now {
		k := tagKey{app, t}
		s.tagged[k] = insertSorted(s.tagged[k], name)
	}
}

// ListTagged returns up to limit of the app's devices tagged tag, in name
// order, after the name cursor.
func (s *Store) ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list tagged devices: limit %d is not positive", limit)
	}
	if err := s.lock(ctx); err != nil {
		return store.DevicePage{}, err
	}
	defer s.mu.Unlock()
	names := s.tagged[tagKey{appKey, tag}]
	i := 0
	if cursor != "" {
		i, _ = slices.BinarySearch(names, cursor+"\x00")
	}
	var page store.DevicePage
	for ; i < len(names); i++ {
		if len(page.Devices) == limit {
			page.Next = page.Devices[limit-1].Name
			break
		}
		page.Devices = append(page.Devices, s.devices[devKey{appKey, names[i]}])
	}
	return page, nil
}

// EnabledNames returns the names of the app's enabled devices carrying
// tag (all with ""), in name order.
func (s *Store) EnabledNames(ctx context.Context, appKey, tag string) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	names := s.names[appKey]
	if tag != "" {
		names = s.tagged[tagKey{appKey, tag}]
	}
	out := []string{}
	for _, n := range names {
		if s.devices[devKey{appKey, n}].Flag == store.FlagEnabled {
			out = append(out, n)
		}
	}
	return out, nil
}

// FlagEpoch returns the store's flag epoch (see store.BroadcastStep's
// Epoch), an optional method outside the store.Store contract that the
// fan-out and batch sends look for: UpdateDevice and DeleteDevice bump
// it under the store's lock. ok is always true.
func (s *Store) FlagEpoch() (uint64, bool) { return s.flagEpoch.Load(), true }

// GetDevices returns the app's devices of names that exist, in order.
func (s *Store) GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]store.Device, 0, len(names))
	for _, n := range names {
		if d, ok := s.devices[devKey{appKey, n}]; ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// CreateMessages stores the messages, their outbox entries, seq and step
// under one hold of the lock; see store.Store.
func (s *Store) CreateMessages(ctx context.Context, appKey string, msgs []store.BatchMessage, seq *store.BatchSeq, step *store.BroadcastStep) ([]int, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if seq != nil && s.seqUsed(appKey, seq.SeqNo, &seq.Entry) {
		return nil, store.ErrSeqUsed
	}
	var b *store.Broadcast
	if step != nil {
		cur, ok := s.broadcasts[bcKey{appKey, step.ID}]
		if !ok || cur.State != store.BroadcastFanningOut || cur.Chunk != step.Chunk {
			return nil, store.ErrVersionConflict
		}
		b = &cur
	}
	outcomes := make([]int, len(msgs))
	stored := make([]store.Message, 0, len(msgs))
	queued := map[devKey]int{} // queue entries this call adds
	for i, bm := range msgs {
		m := bm.Message
		if m.State == store.StatePending {
			k := devKey{appKey, m.DeviceName}
			if _, ok := s.devices[k]; !ok {
				outcomes[i] = store.BatchGone
				continue
			}
			if len(s.queues[k])+queued[k] >= store.MaxPending {
				outcomes[i], m = store.BatchFull, bm.Full
			} else {
				queued[k]++
			}
		}
		c, err := clone(m)
		if err != nil {
			return nil, fmt.Errorf("create message %d: %w", m.ID, err)
		}
		c.AppKey = appKey
		stored = append(stored, c)
	}
	var entries []store.OutboxEntry
	for _, m := range stored {
		e, err := outboxEntries(m, 0)
		if err != nil {
			return nil, fmt.Errorf("create message %d: %w", m.ID, err)
		}
		entries = append(entries, e...)
	}
	for _, m := range stored {
		if m.State == store.StatePending {
			k := devKey{appKey, m.DeviceName}
			s.queues[k] = insertSorted(s.queues[k], m.ID)
			s.pending[m.ID] = true
		}
		s.msgs[m.ID] = m
		s.appMsgs[appKey] = insertSorted(s.appMsgs[appKey], m.ID)
		s.lastID = max(s.lastID, m.ID)
		if b != nil {
			b.Queued++
			if b.FirstID == 0 || m.ID < b.FirstID {
				b.FirstID = m.ID
			}
			b.LastID = max(b.LastID, m.ID)
		}
	}
	s.addOutbox(entries)
	if seq != nil {
		e := seq.Entry
		e.Body = seq.Body(msgs, outcomes)
		s.putSeq(appKey, seq.SeqNo, &e)
	}
	if b != nil {
		delete(s.targets, chunkKey{bcKey{appKey, step.ID}, step.Chunk})
		b.Chunk = step.Chunk + 1
		if step.Done {
			b.State = store.BroadcastDone
		}
		s.broadcasts[bcKey{appKey, step.ID}] = *b
	}
	return outcomes, nil
}

// bcKey names a broadcast.
type bcKey struct {
	app string
	id  int64
}

// chunkKey names one chunk of a broadcast's targets.
type chunkKey struct {
	bc bcKey
	n  int
}

// CreateBroadcast stores b and its targets, recording seq; see
// store.Store.
func (s *Store) CreateBroadcast(ctx context.Context, b store.Broadcast, targets [][]string, seqNo int64, seq *store.SeqEntry) error {
	c, err := clone(b)
	if err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.seqUsed(b.AppKey, seqNo, seq) {
		return store.ErrSeqUsed
	}
	k := bcKey{b.AppKey, b.ID}
	if _, ok := s.broadcasts[k]; ok {
		return store.ErrAlreadyExists
	}
	s.broadcasts[k] = c
	for n, names := range targets {
		s.targets[chunkKey{k, n}] = slices.Clone(names)
	}
	s.putSeq(b.AppKey, seqNo, seq)
	return nil
}

// BroadcastTargets returns chunk n of the broadcast's targets.
func (s *Store) BroadcastTargets(ctx context.Context, appKey string, id int64, n int) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	names, ok := s.targets[chunkKey{bcKey{appKey, id}, n}]
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(names), nil
}

// GetBroadcast returns the app's broadcast or store.ErrNotFound.
func (s *Store) GetBroadcast(ctx context.Context, appKey string, id int64) (store.Broadcast, error) {
	if err := s.lock(ctx); err != nil {
		return store.Broadcast{}, err
	}
	defer s.mu.Unlock()
	b, ok := s.broadcasts[bcKey{appKey, id}]
	if !ok {
		return store.Broadcast{}, store.ErrNotFound
	}
	return clone(b)
}

// UpdateBroadcast applies fn to a copy of the broadcast and stores it.
func (s *Store) UpdateBroadcast(ctx context.Context, appKey string, id int64, fn func(*store.Broadcast) error) (store.Broadcast, error) {
	if err := s.lock(ctx); err != nil {
		return store.Broadcast{}, err
	}
	defer s.mu.Unlock()
	k := bcKey{appKey, id}
	cur, ok := s.broadcasts[k]
	if !ok {
		return store.Broadcast{}, store.ErrNotFound
	}
	b, err := clone(cur)
	if err != nil {
		return store.Broadcast{}, err
	}
	if err := fn(&b); err != nil {
		return store.Broadcast{}, err
	}
	b.ID, b.AppKey, b.Chunks, b.Chunk = id, appKey, cur.Chunks, cur.Chunk
	if s.broadcasts[k], err = clone(b); err != nil {
		return store.Broadcast{}, err
	}
	if b.State != store.BroadcastFanningOut {
		for n := b.Chunk; n < b.Chunks; n++ {
			delete(s.targets, chunkKey{k, n})
		}
	}
	return b, nil
}

// ActiveBroadcasts returns every active broadcast, oldest (lowest id) first.
func (s *Store) ActiveBroadcasts(ctx context.Context) ([]store.Broadcast, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Broadcast
	for _, b := range s.broadcasts {
		if b.Active() {
			c, err := clone(b)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b store.Broadcast) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// CountBroadcast is store.Fleet's, by listing the messages.
func (s *Store) CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (store.BroadcastCounts, error) {
	return store.CountByListing(ctx, s.ListMessages, appKey, id, first, last)
}
