package memory

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/devmsg/devmsg/store"
)

// eventLog is one app's event log. IDs are dense: each append takes
// last+1, and trimming only removes the oldest events.
type eventLog struct {
	evs  []store.Event // in ID order
	last int64         // the highest ID handed out
	// trimmed is the highest ID trimmed away, for ErrEventsTrimmed.
	trimmed int64
	// wake is closed, and replaced, when events are appended.
	wake chan struct{}
}

// log returns appKey's event log, making it on first use; s.mu is held.
func (s *Store) log(appKey string) *eventLog {
	l := s.events[appKey]
	if l == nil {
		l = &eventLog{wake: make(chan struct{})}
		s.events[appKey] = l
	}
	return l
}

// appendLocked appends copies of evs to their apps' logs, setting the
// IDs on evs; s.mu is held. Every caller appends in the same critical
// section as its state change, which is what makes the two atomic.
func (s *Store) appendLocked(evs []store.Event) {
	woken := map[*eventLog]bool{}
	for i := range evs {
		e := &evs[i]
		l := s.log(e.AppKey)
		l.last++
		e.ID = l.last
		e.Data = store.NormalData(e.Data)
		c := *e
		c.Data = slices.Clone(e.Data)
		l.evs = append(l.evs, c)
		woken[l] = true
	}
	for l := range woken {
		close(l.wake)
		l.wake = make(chan struct{})
	}
}

// AppendEvents appends evs, in order, to their apps' logs.
func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	out := slices.Clone(evs)
	for _, e := range out {
		if e.AppKey == "" {
			return nil, fmt.Errorf("append events: an event of type %q has no app key", e.Type)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.appendLocked(out)
	return out, nil
}

// ReadEvents returns the events of q.AppKey's log after q.After; see
// store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	if err := q.Check(); err != nil {
		return store.EventPage{}, err
	}
	if err := s.lock(ctx); err != nil {
		return store.EventPage{}, err
	}
	defer s.mu.Unlock()
	page := store.EventPage{Next: q.After}
	l := s.events[q.AppKey]
	if l == nil {
		return page, nil
	}
	if len(l.evs) > 0 {
		page.Oldest = l.evs[0].ID
	}
	page.Newest = l.last
	if q.After != 0 && q.After < l.trimmed {
		return page, store.ErrEventsTrimmed
	}
	i := sort.Search(len(l.evs), func(i int) bool { return l.evs[i].ID > q.After })
	size := 0
	for n := q.Examine(); i < len(l.evs) && n > 0; i, n = i+1, n-1 {
		e := l.evs[i]
		if q.Match(e) {
			if size += len(e.Data); size > store.MaxEventPageBytes && len(page.Events) > 0 {
				break
			}
			e.Data = slices.Clone(e.Data)
			page.Events = append(page.Events, e)
		}
		page.Next = e.ID
	}
	return page, nil
}

// WaitEvents returns once appKey's log holds an ID above after.
func (s *Store) WaitEvents(ctx context.Context, appKey string, after int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	l := s.log(appKey)
	last, wake := l.last, l.wake
	s.mu.Unlock()
	if last > after {
		return nil
	}
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TrimEvents deletes appKey's oldest events by age and count.
func (s *Store) TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	l := s.events[appKey]
	if l == nil {
		return 0, nil
	}
	n := 0
	for olderThan > 0 && n < len(l.evs) && l.evs[n].Time < olderThan {
		n++
	}
	if max > 0 && len(l.evs)-n > max {
		n = len(l.evs) - max
	}
	if n == 0 {
		return 0, nil
	}
	l.trimmed = l.evs[n-1].ID
	l.evs = slices.Delete(l.evs, 0, n)
	return n, nil
}
