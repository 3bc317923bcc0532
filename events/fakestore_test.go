package events_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/devmsg/devmsg/store"
)

// fakeStore is the part of a store webhooks use, in memory: apps, one
// event log per app with the EventLog contract's reads, waits and trims,
// and meta values. Unlike store/memory it lets a test trim by id.
type fakeStore struct {
	mu      sync.Mutex
	apps    map[string]store.App
	logs    map[string][]store.Event
	trimmed map[string]int64 // per app, the highest trimmed ID
	meta    map[string][]byte
	lastID  int64
	grown   chan struct{} // closed and replaced on every append
	reads   []int64       // the After of every ReadEvents, in order
}

func newFakeStore() *fakeStore {
	return &fakeStore{apps: map[string]store.App{}, logs: map[string][]store.Event{},
		trimmed: map[string]int64{}, meta: map[string][]byte{}, grown: make(chan struct{})}
}

func (s *fakeStore) ListApps(context.Context) ([]store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.App
	for _, a := range s.apps {
		out = append(out, clone(a))
	}
	return out, nil
}

func (s *fakeStore) Get(_ context.Context, key string) (store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apps[key]
	if !ok {
		return a, store.ErrNotFound
	}
	return clone(a), nil
}

func (s *fakeStore) Update(_ context.Context, key string, fn func(*store.App) error) (store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apps[key]
	if !ok {
		return a, store.ErrNotFound
	}
	a = clone(a)
	if err := fn(&a); err != nil {
		return store.App{}, err
	}
	s.apps[key] = clone(a)
	return a, nil
}

// clone copies an app as a store that serialises it would.
func clone(a store.App) store.App {
	b, _ := json.Marshal(a)
	var out store.App
	_ = json.Unmarshal(b, &out)
	return out
}

func (s *fakeStore) AppendEvents(_ context.Context, evs []store.Event) ([]store.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(evs)
	for i := range out {
		s.lastID += 3 // not dense, as the contract allows
		out[i].ID = s.lastID
		s.logs[out[i].AppKey] = append(s.logs[out[i].AppKey], out[i])
	}
	close(s.grown)
	s.grown = make(chan struct{})
	return out, nil
}

func (s *fakeStore) ReadEvents(_ context.Context, q store.EventQuery) (store.EventPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads = append(s.reads, q.After)
	log := s.logs[q.AppKey]
	p := store.EventPage{Next: q.After}
	if len(log) > 0 {
		p.Oldest = log[0].ID
		p.Newest = log[len(log)-1].ID
	}
	p.Newest = max(p.Newest, s.trimmed[q.AppKey])
	if q.After != 0 && s.trimmed[q.AppKey] > q.After {
		return p, store.ErrEventsTrimmed
	}
	examine := q.Limit
	if len(q.Types) > 0 || q.DeviceName != "" {
		examine = min(10*q.Limit, 10000)
	}
	for _, e := range log {
		if e.ID <= q.After {
			continue
		}
		if examine == 0 || len(p.Events) == q.Limit {
			break
		}
		examine--
		p.Next = e.ID
		if (len(q.Types) == 0 || slices.Contains(q.Types, e.Type)) && (q.DeviceName == "" || q.DeviceName == e.DeviceName) {
			p.Events = append(p.Events, e)
		}
	}
	return p, nil
}

func (s *fakeStore) WaitEvents(ctx context.Context, appKey string, after int64) error {
	for {
		s.mu.Lock()
		log, grown := s.logs[appKey], s.grown
		s.mu.Unlock()
		if len(log) > 0 && log[len(log)-1].ID > after {
			return nil
		}
		select {
		case <-grown:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// trim deletes the app's events up to and including id.
func (s *fakeStore) trim(appKey string, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.logs[appKey]
	i := 0
	for i < len(log) && log[i].ID <= id {
		s.trimmed[appKey] = log[i].ID
		i++
	}
	s.logs[appKey] = log[i:]
}

func (s *fakeStore) GetMeta(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.meta[key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(v), nil
}

func (s *fakeStore) PutMeta(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta[key] = slices.Clone(value)
	return nil
}

func (s *fakeStore) Barrier(context.Context) error { return nil }

// readAfter reports whether a ReadEvents started after id.
func (s *fakeStore) readAfter(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.reads, func(a int64) bool { return a >= id })
}
