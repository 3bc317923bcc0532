package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/devmsg/devmsg/store"
)

// ReadOutbox returns the heads of the oldest outbox entries with Seq
// above after.
func (s *Store) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.OutboxHead
	for _, seq := range slices.Sorted(maps.Keys(s.outbox)) {
		if seq <= after {
			continue
		}
		if out = append(out, s.outbox[seq].Head()); len(out) == limit {
			break
		}
	}
	return out, nil
}

// RouteOutbox moves outbox entries into their delivery queues; an entry
// no longer in the outbox is left out.
func (s *Store) RouteOutbox(ctx context.Context, routes []store.OutboxRoute) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, r := range routes {
		e, ok := s.outbox[r.Entry.Seq]
		if !ok {
			continue
		}
		delete(s.outbox, r.Entry.Seq)
		if r.URL != "" {
			s.enqueue(store.CallbackQueue{AppKey: e.AppKey, URL: r.URL}, e)
		}
	}
	return nil
}

// CallbackQueues lists the non-empty delivery queues, by app and URL.
func (s *Store) CallbackQueues(ctx context.Context) ([]store.CallbackQueue, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Keys(s.callbacks), func(a, b store.CallbackQueue) int {
		return cmp.Or(cmp.Compare(a.AppKey, b.AppKey), cmp.Compare(a.URL, b.URL))
	}), nil
}

// ReadCallbacks returns the oldest entries of a delivery queue with Seq
// above after. It is a durable read as store.Store asks: a write is
// visible here only once applied.
func (s *Store) ReadCallbacks(ctx context.Context, q store.CallbackQueue, after int64, limit int) ([]store.OutboxEntry, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return readEntries(s.callbacks[q], after, limit)
}

// DeleteCallbacks removes entries from a delivery queue.
func (s *Store) DeleteCallbacks(ctx context.Context, q store.CallbackQueue, seqs []int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.dequeue(q, seqs...)
	return nil
}

// MoveCallbacks moves entries from one delivery queue to the end of
// another of the app, with new Seqs.
func (s *Store) MoveCallbacks(ctx context.Context, from store.CallbackQueue, entries []store.OutboxEntry, toURL string) error {
	moved := make([]store.OutboxEntry, len(entries))
	for i, e := range entries {
		c, err := clone(e)
		if err != nil {
			return fmt.Errorf("move callbacks: %w", err)
		}
		moved[i] = c
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	to := store.CallbackQueue{AppKey: from.AppKey, URL: toURL}
	for _, e := range moved {
		s.dequeue(from, e.Seq)
		s.lastSeq++
		e.Seq = s.lastSeq
		s.enqueue(to, e)
	}
	return nil
}

// PutDeadLetter files d and takes its entries off their queue.
func (s *Store) PutDeadLetter(ctx context.Context, d store.DeadLetter) error {
	id, err := strconv.ParseInt(d.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("dead letter id %q: not a number", d.ID)
	}
	stored, err := clone(d)
	if err != nil {
		return fmt.Errorf("put dead letter: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, taken := s.dead[d.AppKey][id]; taken {
		return fmt.Errorf("put dead letter: id %s %w", d.ID, store.ErrAlreadyExists)
	}
	q := store.CallbackQueue{AppKey: d.AppKey, URL: d.URL}
	for _, e := range d.Entries {
		s.dequeue(q, e.Seq)
	}
	if s.dead[d.AppKey] == nil {
		s.dead[d.AppKey] = map[int64]store.DeadLetter{}
	}
	s.dead[d.AppKey][id] = stored
	return nil
}

// ListDeadLetters returns an app's dead letters in id order, after the
// id cursor.
func (s *Store) ListDeadLetters(ctx context.Context, appKey, cursor string, limit int) ([]store.DeadLetter, error) {
	if limit < 1 {
		return nil, nil
	}
	var after *int64
	if cursor != "" {
		id, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("dead letter cursor %q: not a number", cursor)
		}
		after = &id
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.DeadLetter
	for _, id := range slices.Sorted(maps.Keys(s.dead[appKey])) {
		if after != nil && id <= *after {
			continue
		}
		d, err := clone(s.dead[appKey][id])
		if err != nil {
			return nil, err
		}
		if out = append(out, d); len(out) == limit {
			break
		}
	}
	return out, nil
}

// RedeliverDeadLetter moves a dead letter's entries back to the end of
// its queue, with new Seqs.
func (s *Store) RedeliverDeadLetter(ctx context.Context, appKey, id string) (store.DeadLetter, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return store.DeadLetter{}, store.ErrNotFound
	}
	if err := s.lock(ctx); err != nil {
		return store.DeadLetter{}, err
	}
	defer s.mu.Unlock()
	d, ok := s.dead[appKey][n]
	if !ok {
		return store.DeadLetter{}, store.ErrNotFound
	}
	out, err := clone(d)
	if err != nil {
		return store.DeadLetter{}, err
	}
	delete(s.dead[appKey], n)
	q := store.CallbackQueue{AppKey: d.AppKey, URL: d.URL}
	for _, e := range d.Entries {
		// A new Seq puts the entry behind what was queued meanwhile.
		s.lastSeq++
		e.Seq = s.lastSeq
		s.enqueue(q, e)
	}
	return out, nil
}

// enqueue adds e, which the caller no longer holds, to the queue q.
func (s *Store) enqueue(q store.CallbackQueue, e store.OutboxEntry) {
	if s.callbacks[q] == nil {
		s.callbacks[q] = map[int64]store.OutboxEntry{}
	}
	s.callbacks[q][e.Seq] = e
}

// dequeue removes the entries with the seqs from q, and q once empty.
func (s *Store) dequeue(q store.CallbackQueue, seqs ...int64) {
	for _, seq := range seqs {
		delete(s.callbacks[q], seq)
	}
	if len(s.callbacks[q]) == 0 {
		delete(s.callbacks, q)
	}
}

// readEntries returns copies of up to limit of the entries with Seq
// above after, in Seq order.
func readEntries(entries map[int64]store.OutboxEntry, after int64, limit int) ([]store.OutboxEntry, error) {
	var out []store.OutboxEntry
	for _, seq := range slices.Sorted(maps.Keys(entries)) {
		if seq <= after {
			continue
		}
		e, err := clone(entries[seq])
		if err != nil {
			return nil, err
		}
		if out = append(out, e); len(out) == limit {
			break
		}
	}
	return out, nil
}
