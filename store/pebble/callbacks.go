package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Callback delivery: the outbox (b/) holds records in the order they
// were made; the worker routes them into one queue per app and URL (k/),
// delivers each queue's oldest entries and deletes them, and files the
// batches that failed every retry as dead letters (l/). An entry keeps
// its Seq from the outbox to its queue; Seqs come from one counter that
// Open restores above every key of the outbox and the queues.

// queuePrefix is the key prefix of q's entries.
func queuePrefix(q store.CallbackQueue) []byte { return key(pCallback, q.AppKey, q.URL, "") }

func cbQueueKey(q store.CallbackQueue, seq int64) []byte {
	return binary.BigEndian.AppendUint64(queuePrefix(q), uint64(seq))
}

// deadKey files dead letters of an app in id order; ids are decimal Seqs.
func deadKey(app string, id int64) []byte {
	return binary.BigEndian.AppendUint64(key(pDead, app, ""), uint64(id))
}

// restoreCallbackSeq raises the Seq counter above every queued entry
// and every dead letter's id (the Seq of its first entry): the outbox may
// be empty while queues and dead letters hold Seqs that must not be
// handed out again.
func (s *Store) restoreCallbackSeq() error {
	raise := func(last []byte) {
		if seq := int64(binary.BigEndian.Uint64(last[len(last)-8:])); seq > s.outboxSeq.Load() {
			s.outboxSeq.Store(seq)
		}
	}
	qs, err := s.callbackQueues()
	if err != nil {
		return err
	}
	for _, q := range qs {
		last, err := s.lastKey(string(queuePrefix(q)))
		if err != nil {
			return err
		}
		if last != nil {
			raise(last)
		}
	}
	// The last dead letter of each app, seeking from one app to the next.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pDead), UpperBound: prefixEnd([]byte(pDead))})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; {
		k := it.Key()
		app, _, found := bytes.Cut(k[len(pDead):], []byte{0})
		if !found {
			return fmt.Errorf("restore callback seq: malformed key %q", k)
		}
		end := prefixEnd(key(pDead, string(app), ""))
		if it.SeekLT(end) {
			raise(it.Key())
		}
		ok = it.SeekGE(end)
	}
	return it.Error()
}

// seqLower is where a read of the keys made of prefix and a Seq above
// after starts. Starting past after matters: the keys before it are
// mostly deleted, and iterating over their tombstones is what reading
// from the prefix would cost.
func seqLower(prefix []byte, after int64) []byte {
	if after <= 0 {
		return prefix
	}
	return binary.BigEndian.AppendUint64(bytes.Clone(prefix), uint64(after)+1)
}

// readEntries decodes up to limit entries from keys made of prefix and a
// Seq above after.
func (s *Store) readEntries(prefix []byte, after int64, limit int) ([]store.OutboxEntry, error) {
	var out []store.OutboxEntry
	err := s.scan(seqLower(prefix, after), prefixEnd(prefix), func(k, v []byte) (bool, error) {
		var e store.OutboxEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		out = append(out, e)
		return len(out) < limit, nil
	})
	return out, err
}

// ReadOutbox returns the heads of the oldest outbox entries, read from
// the start of their JSON (store.DecodeOutboxHead): the records are not
// decoded, as most are dropped and the rest move into a queue as stored.
func (s *Store) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var out []store.OutboxHead // the router polls an outbox that is mostly empty: no slice for it
	err := s.scan(seqLower([]byte(pOutbox), after), prefixEnd([]byte(pOutbox)), func(k, v []byte) (bool, error) {
		if out == nil {
			out = make([]store.OutboxHead, 0, min(limit, 256))
		}
		h, err := store.DecodeOutboxHead(v)
		if err != nil {
			return false, fmt.Errorf("%q: %w", k, err)
		}
		out = append(out, h)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// RouteOutbox moves outbox entries into their delivery queues in one
// batch. A routed entry's value is copied as stored, not decoded and
// encoded again; an entry no longer in the outbox is left out.
func (s *Store) RouteOutbox(ctx context.Context, routes []store.OutboxRoute) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	err := s.write(func(b *pebble.Batch) error {
		var it *pebble.Iterator
		defer func() {
			if it != nil {
				it.Close()
			}
		}()
		for _, r := range routes {
			k := outboxKey(r.Entry.Seq)
			if r.URL == "" {
				if err := b.Delete(k, nil); err != nil {
					return err
				}
				continue
			}
			if it == nil {
				var err error
				if it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pOutbox), UpperBound: prefixEnd([]byte(pOutbox))}); err != nil {
					return err
				}
			}
			if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
				if err := it.Error(); err != nil {
					return err
				}
				continue // routed already, or never there
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			if err := b.Delete(k, nil); err != nil {
				return err
			}
			// Set copies v into the batch.
			if err := b.Set(cbQueueKey(store.CallbackQueue{AppKey: r.Entry.AppKey, URL: r.URL}, r.Entry.Seq), v, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("route outbox: %w", err)
	}
	return nil
}

// CallbackQueues lists the non-empty delivery queues, seeking past each
// queue's entries rather than reading them.
func (s *Store) CallbackQueues(ctx context.Context) ([]store.CallbackQueue, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	return s.callbackQueues()
}

func (s *Store) callbackQueues() ([]store.CallbackQueue, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pCallback), UpperBound: prefixEnd([]byte(pCallback))})
	if err != nil {
		return nil, fmt.Errorf("callback queues: %w", err)
	}
	defer it.Close()
	var out []store.CallbackQueue
	for ok := it.First(); ok; {
		k := it.Key()
		rest := k[len(pCallback) : len(k)-8]
		app, u, found := bytes.Cut(bytes.TrimSuffix(rest, []byte{0}), []byte{0})
		if !found {
			return nil, fmt.Errorf("callback queues: malformed key %q", k)
		}
		q := store.CallbackQueue{AppKey: string(app), URL: string(u)}
		out = append(out, q)
		ok = it.SeekGE(prefixEnd(queuePrefix(q)))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("callback queues: %w", err)
	}
	return out, nil
}

// ReadCallbacks returns the oldest entries of a delivery queue: a durable
// read (store.Store), so when it returns any it waits for every write the
// read could see to be durable (the worker called Barrier for it before).
func (s *Store) ReadCallbacks(ctx context.Context, q store.CallbackQueue, after int64, limit int) ([]store.OutboxEntry, error) {
	if limit < 1 {
		return nil, nil
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	out, err := s.readEntries(queuePrefix(q), after, limit)
	if err != nil {
		return nil, fmt.Errorf("read callback queue: %w", err)
	}
	// A durable read: the entries' writes may be visible before they are
	// durable.
	if len(out) > 0 {
		if err := s.barrier(); err != nil {
			return nil, fmt.Errorf("read callback queue: %w", err)
		}
	}
	return out, nil
}

// DeleteCallbacks removes entries from a delivery queue.
func (s *Store) DeleteCallbacks(ctx context.Context, q store.CallbackQueue, seqs []int64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	err := s.write(func(b *pebble.Batch) error {
		for _, seq := range seqs {
			if err := b.Delete(cbQueueKey(q, seq), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete callbacks: %w", err)
	}
	return nil
}

// MoveCallbacks moves entries from one delivery queue to the end of
// another, with new Seqs.
func (s *Store) MoveCallbacks(ctx context.Context, from store.CallbackQueue, entries []store.OutboxEntry, toURL string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	to := store.CallbackQueue{AppKey: from.AppKey, URL: toURL}
	err := s.write(func(b *pebble.Batch) error {
		for _, e := range entries {
			if err := b.Delete(cbQueueKey(from, e.Seq), nil); err != nil {
				return err
			}
			e.Seq = s.outboxSeq.Add(1)
			if err := setJSON(b, cbQueueKey(to, e.Seq), e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("move callbacks: %w", err)
	}
	return nil
}

// PutDeadLetter files d and takes its entries off their queue.
func (s *Store) PutDeadLetter(ctx context.Context, d store.DeadLetter) error {
	id, err := strconv.ParseInt(d.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("dead letter id %q: not a number", d.ID)
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	q := store.CallbackQueue{AppKey: d.AppKey, URL: d.URL}
	if taken, err := s.exists(deadKey(d.AppKey, id)); err != nil || taken {
		if err == nil {
			err = fmt.Errorf("id %s %w", d.ID, store.ErrAlreadyExists)
		}
		return fmt.Errorf("put dead letter: %w", err)
	}
	err = s.write(func(b *pebble.Batch) error {
		for _, e := range d.Entries {
			if err := b.Delete(cbQueueKey(q, e.Seq), nil); err != nil {
				return err
			}
		}
		return setJSON(b, deadKey(d.AppKey, id), d)
	})
	if err != nil {
		return fmt.Errorf("put dead letter: %w", err)
	}
	return nil
}

// ListDeadLetters returns an app's dead letters in id order.
func (s *Store) ListDeadLetters(ctx context.Context, appKey, cursor string, limit int) ([]store.DeadLetter, error) {
	if limit < 1 {
		return nil, nil
	}
	lower := key(pDead, appKey, "")
	if cursor != "" {
		id, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("dead letter cursor %q: not a number", cursor)
		}
		lower = prefixEnd(deadKey(appKey, id))
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var out []store.DeadLetter
	err := s.scan(lower, prefixEnd(key(pDead, appKey, "")), func(k, v []byte) (bool, error) {
		var d store.DeadLetter
		if err := json.Unmarshal(v, &d); err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		out = append(out, d)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// RedeliverDeadLetter moves a dead letter's entries back to its queue.
func (s *Store) RedeliverDeadLetter(ctx context.Context, appKey, id string) (store.DeadLetter, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return store.DeadLetter{}, store.ErrNotFound
	}
	if err := s.enter(ctx); err != nil {
		return store.DeadLetter{}, err
	}
	defer s.exit()
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	var d store.DeadLetter
	if err := s.getJSON(deadKey(appKey, n), &d); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return d, err
		}
		return d, fmt.Errorf("redeliver: %w", err)
	}
	q := store.CallbackQueue{AppKey: d.AppKey, URL: d.URL}
	err = s.write(func(b *pebble.Batch) error {
		if err := b.Delete(deadKey(appKey, n), nil); err != nil {
			return err
		}
		for _, e := range d.Entries {
			// A new Seq puts the entry behind what was queued meanwhile
			// and cannot collide with an entry that took its old one.
			e.Seq = s.outboxSeq.Add(1)
			if err := setJSON(b, cbQueueKey(q, e.Seq), e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("redeliver: %w", err)
	}
	return d, nil
}
