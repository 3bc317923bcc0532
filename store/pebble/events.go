package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// The event log.
//
// Keys: v/<app>\0<id> (id big-endian) holds an event, w/<app> the highest
// id trimmed away. IDs are dense per app: appends take last+1, trims only
// delete the oldest events, and an id is never handed out by a write that
// fails (see commitEvents). So a gap behind a cursor can only be a trim,
// and a reader can tell from what it reads.
//
// Order and durability. Pebble shows a batch to readers before its WAL
// fsync, and group commit lets many synced batches share one fsync. An
// append assigns its ids and hands its batch to Pebble (ApplyNoSyncWait)
// under evMu, so Pebble's sequence numbers, the order in which it
// publishes batches and writes them to the WAL, follow id order within
// every app. It then waits for the fsync outside evMu, so concurrent
// appends share fsyncs. Readers see only ids up to the app's durable
// watermark, which an append raises once its fsync is done: the WAL is
// synced in order, so every lower id of the app, in an earlier batch, is
// then durable too, and already published. So a reader never sees an
// event a crash could take back, nor a gap that fills later.

// eventApp is the in-memory state of one app's log.
type eventApp struct {
	// last is the highest id handed out; evMu guards it.
	last int64
	// durable is the highest id whose batch is synced, and wake is closed
	// and replaced when it rises; wakeMu guards both.
	durable int64
	wake    chan struct{}
}

// eventLogs holds the state of every app whose log has been touched.
type eventLogs struct {
	// mu (the "evMu" above) guards loading apps and each app's last, and
	// is held from assigning ids to handing the batch to Pebble.
	mu sync.Mutex
	// apps maps an app key to its *eventApp, stored once loaded; readers
	// look it up without mu, which a stalled write may hold a while.
	apps sync.Map
	// wakeMu guards each app's durable and wake.
	wakeMu sync.Mutex
	// trimMu serialises trims.
	trimMu sync.Mutex
}

func eventPrefix(app string) []byte { return key(pEvent, app, "") }

func eventKey(app string, id int64) []byte {
	return binary.BigEndian.AppendUint64(eventPrefix(app), uint64(id))
}

// encodeEvent lays an event out as uvarint-prefixed type and device
// name, the varint time, then the data as it came.
func encodeEvent(e store.Event) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(e.Type)+len(e.DeviceName)+len(e.Data))
	b = binary.AppendUvarint(b, uint64(len(e.Type)))
	b = append(b, e.Type...)
	b = binary.AppendUvarint(b, uint64(len(e.DeviceName)))
	b = append(b, e.DeviceName...)
	b = binary.AppendVarint(b, e.Time)
	return append(b, e.Data...)
}

var errBadEvent = errors.New("malformed event")

// decodeEvent reverses encodeEvent; the event's Data is a copy.
func decodeEvent(app string, id int64, v []byte) (store.Event, error) {
	e := store.Event{ID: id, AppKey: app}
	str := func() (string, error) {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			return "", errBadEvent
		}
		s := string(v[k : k+int(n)])
		v = v[k+int(n):]
		return s, nil
	}
	var err error
	if e.Type, err = str(); err != nil {
		return e, err
	}
	if e.DeviceName, err = str(); err != nil {
		return e, err
	}
	t, k := binary.Varint(v)
	if k <= 0 {
		return e, errBadEvent
	}
	e.Time = t
	e.Data = append([]byte{}, v[k:]...)
	return e, nil
}

// eventTime decodes only an encoded event's time.
func eventTime(v []byte) (int64, error) {
	for range 2 {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			return 0, errBadEvent
		}
		v = v[k+int(n):]
	}
	t, k := binary.Varint(v)
	if k <= 0 {
		return 0, errBadEvent
	}
	return t, nil
}

// app returns the app's log state, loading it on first use: the last id
// is the greater of the last event's and the last trimmed one's, and
// everything on disk at that point is durable. ev.mu is held.
func (s *Store) eventApp(app string) (*eventApp, error) {
	if a, ok := s.events.apps.Load(app); ok {
		return a.(*eventApp), nil
	}
	a := &eventApp{wake: make(chan struct{})}
	last, err := s.lastKey(string(eventPrefix(app)))
	if err != nil {
		return nil, err
	}
	if last != nil {
		a.last = int64(binary.BigEndian.Uint64(last[len(last)-8:]))
	}
	trimmed, err := s.trimmedThrough(app)
	if err != nil {
		return nil, err
	}
	a.last = max(a.last, trimmed)
	a.durable = a.last
	s.events.apps.Store(app, a)
	return a, nil
}

// lockedApp returns the app's state, taking ev.mu only to load it.
func (s *Store) lockedApp(app string) (*eventApp, error) {
	if a, ok := s.events.apps.Load(app); ok {
		return a.(*eventApp), nil
	}
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return s.eventApp(app)
}

// trimmedThrough returns the highest id trimmed from the app's log, 0 if none.
func (s *Store) trimmedThrough(app string) (int64, error) {
	v, err := s.get(key(pEventTrim, app))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("trim mark of %s: %d bytes", app, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// writeEvents is write for a batch that may carry events: fill builds the
// batch and returns the events to append with it (their IDs are set in
// place). Without events it is write; with them, see the top of this
// file. It returns once the batch is durable.
func (s *Store) writeEvents(fill func(b *pebble.Batch) ([]store.Event, error)) error {
	w, err := s.applyEvents(fill)
	if err != nil {
		return err
	}
	return w.durable()
}

// applied is a synced write that Pebble has applied, so reads see it,
// and whose sync is still to be waited for (durable).
type applied struct {
	s       *Store
	b       *pebble.Batch
	highest map[*eventApp]int64 // the events' highest id per app
}

// applyEvents is writeEvents up to the point where reads see the batch:
// a writer that holds locks for its read-modify-write releases them then
// and waits for durable after, so that the writers queued behind its
// locks do not wait for its fsync too. The write counts in s.committing
// until durable, so a durable read (barrier) syncs past it. On an error
// nothing is applied.
func (s *Store) applyEvents(fill func(b *pebble.Batch) ([]store.Event, error)) (*applied, error) {
	b := s.db.NewBatch()
	evs, err := fill(b)
	if err != nil {
		b.Close()
		return nil, err
	}
	for i := range evs {
		evs[i].Data = store.NormalData(evs[i].Data)
		if evs[i].AppKey == "" {
			b.Close()
			return nil, fmt.Errorf("append events: an event of type %q has no app key", evs[i].Type)
		}
	}
	s.committing.Add(1)
	var highest map[*eventApp]int64
	if len(evs) == 0 {
		err = s.db.ApplyNoSyncWait(b, pebble.Sync)
		if err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	} else {
		highest, err = s.appendEvents(b, evs)
	}
	if err != nil {
		s.committing.Add(-1)
		b.Close()
		return nil, err
	}
	return &applied{s: s, b: b, highest: highest}, nil
}

// durable waits for the write's sync, then wakes the readers of its
// events.
func (w *applied) durable() error {
	s := w.s
	defer s.committing.Add(-1)
	defer w.b.Close()
	if err := w.b.SyncWait(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if len(w.highest) == 0 {
		return nil
	}
	s.events.wakeMu.Lock()
	for a, id := range w.highest {
		if id > a.durable {
			a.durable = id
			close(a.wake)
			a.wake = make(chan struct{})
		}
	}
	s.events.wakeMu.Unlock()
	return nil
}

// appendEvents assigns the events their ids, adds them to b and hands b
// to Pebble, all under ev.mu; it returns the highest id b holds per app.
// On a failure nothing is applied and the ids are taken back.
func (s *Store) appendEvents(b *pebble.Batch, evs []store.Event) (map[*eventApp]int64, error) {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	highest := map[*eventApp]int64{}
	before := map[*eventApp]int64{}
	undo := func() {
		for a, last := range before {
			a.last = last
		}
	}
	for i := range evs {
		e := &evs[i]
		a, err := s.eventApp(e.AppKey)
		if err != nil {
			undo()
			return nil, fmt.Errorf("append events: %w", err)
		}
		if _, ok := before[a]; !ok {
			before[a] = a.last
		}
		a.last++
		e.ID = a.last
		highest[a] = e.ID
		if err := set(b, eventKey(e.AppKey, e.ID), encodeEvent(*e)); err != nil {
			undo()
			return nil, err
		}
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		undo()
		return nil, fmt.Errorf("commit: %w", err)
	}
	return highest, nil
}

// AppendEvents appends evs in one synced batch.
func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	// What devices publish (telemetry, event reports) is data like a send:
	// refused under the free-space floor.
	if err := s.enterWrite(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	out := make([]store.Event, len(evs))
	copy(out, evs)
	if err := s.writeEvents(func(*pebble.Batch) ([]store.Event, error) { return out, nil }); err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	return out, nil
}

// ReadEvents returns the app's durable events after q.After; see
// store.EventLog. One iterator reads the oldest event and the page, so
// both come from one view of the log. With dense ids, events after
// q.After were trimmed exactly when the oldest id is above q.After+1, or
// when the log is empty although ids up to the watermark were handed out.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	if err := q.Check(); err != nil {
		return store.EventPage{}, err
	}
	if err := s.enter(ctx); err != nil {
		return store.EventPage{}, err
	}
	defer s.exit()
	a, err := s.lockedApp(q.AppKey)
	if err != nil {
		return store.EventPage{}, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	s.events.wakeMu.Lock()
	durable := a.durable
	s.events.wakeMu.Unlock()

	page := store.EventPage{Next: q.After, Newest: durable}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: eventPrefix(q.AppKey), UpperBound: eventKey(q.AppKey, durable+1)})
	if err != nil {
		return page, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	defer it.Close()
	if it.First() {
		k := it.Key()
		page.Oldest = int64(binary.BigEndian.Uint64(k[len(k)-8:]))
	} else if err := it.Error(); err != nil {
		return page, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	if q.After != 0 && ((page.Oldest == 0 && q.After < durable) || (page.Oldest != 0 && q.After < page.Oldest-1)) {
		return page, store.ErrEventsTrimmed
	}
	n, size := q.Examine(), 0
	for ok := it.SeekGE(eventKey(q.AppKey, q.After+1)); ok && n > 0; ok, n = it.Next(), n-1 {
		k := it.Key()
		id := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
		v, err := it.ValueAndErr()
		if err != nil {
			return store.EventPage{}, fmt.Errorf("read event %d of %s: %w", id, q.AppKey, err)
		}
		e, err := decodeEvent(q.AppKey, id, v)
		if err != nil {
			return store.EventPage{}, fmt.Errorf("read event %d of %s: %w", id, q.AppKey, err)
		}
		if q.Match(e) {
			if size += len(e.Data); size > store.MaxEventPageBytes && len(page.Events) > 0 {
				break
			}
			page.Events = append(page.Events, e)
		}
		page.Next = id
	}
	if err := it.Error(); err != nil {
		return store.EventPage{}, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	return page, nil
}

// WaitEvents returns once the app's durable watermark is above after.
func (s *Store) WaitEvents(ctx context.Context, appKey string, after int64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	a, err := s.lockedApp(appKey)
	s.exit() // not held while waiting: Close must not wait for a waiter
	if err != nil {
		return fmt.Errorf("wait events of %s: %w", appKey, err)
	}
	s.events.wakeMu.Lock()
	durable, wake := a.durable, a.wake
	s.events.wakeMu.Unlock()
	if durable > after {
		return nil
	}
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return ErrClosed
	}
}

// TrimEvents deletes the app's oldest events by age and count with one
// range deletion, and records the highest id deleted, so that ids keep
// rising after a restart even when the log is left empty.
func (s *Store) TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	s.events.trimMu.Lock()
	defer s.events.trimMu.Unlock()
	a, err := s.lockedApp(appKey)
	if err != nil {
		return 0, fmt.Errorf("trim events of %s: %w", appKey, err)
	}
	s.events.wakeMu.Lock()
	durable := a.durable
	s.events.wakeMu.Unlock()

	// cut is the highest id to delete; oldest the lowest kept now.
	var oldest, cut int64
	err = s.scan(eventPrefix(appKey), eventKey(appKey, durable+1), func(k, v []byte) (bool, error) {
		id := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
		if oldest == 0 {
			oldest, cut = id, id-1
		}
		t, err := eventTime(v)
		if err != nil {
			return false, fmt.Errorf("event %d: %w", id, err)
		}
		if olderThan <= 0 || t >= olderThan {
			return false, nil
		}
		cut = id
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("trim events of %s: %w", appKey, err)
	}
	if oldest == 0 {
		return 0, nil
	}
	if max > 0 && durable-cut > int64(max) {
		cut = durable - int64(max)
	}
	if cut < oldest {
		return 0, nil
	}
	err = s.write(func(b *pebble.Batch) error {
		if err := b.DeleteRange(eventKey(appKey, oldest), eventKey(appKey, cut+1), nil); err != nil {
			return err
		}
		return set(b, key(pEventTrim, appKey), be64(cut))
	})
	if err != nil {
		return 0, fmt.Errorf("trim events of %s: %w", appKey, err)
	}
	return int(cut - oldest + 1), nil
}
