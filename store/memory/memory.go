package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/store"
)

var _ store.Store = (*Store)(nil)

// FlagEpoch is an optional method outside the contract, which the fan-out
// and batch sends look for (see store.BroadcastStep).
var _ interface {
	FlagEpoch() (epoch uint64, ok bool)
} = (*Store)(nil)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("memory store closed")

// devKey names a device (and its shadow and pending queue) within the store.
type devKey struct{ app, name string }

// seqKey names a seq_no entry.
type seqKey struct {
	app string
	seq int64
}

// Store is the in-memory backend. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu     sync.Mutex
	closed bool
	// flagEpoch is FlagEpoch, bumped under mu.
	flagEpoch atomic.Uint64

	apps    map[string]store.App
	devices map[devKey]store.Device
	// names holds each app's device names in order, for ListDevices.
	names   map[string][]string
	shadows map[devKey]store.Shadow
	seqs    map[seqKey]store.SeqEntry
	meta    map[string][]byte

	msgs map[int64]store.Message
	// appMsgs holds each app's message ids in ascending order.
	appMsgs map[string][]int64
	// queues holds each device's pending message ids in id (send) order.
	queues map[devKey][]int64
	// pending holds the ids of every message in StatePending, the ones
	// ExpiredMessages looks at; a deleted device's pending messages stay.
	pending map[int64]bool
	lastID  int64

	// lastSeq is the Seq last handed out, shared by the outbox, the
	// delivery queues and dead letters.
	lastSeq   int64
	outbox    map[int64]store.OutboxEntry
	callbacks map[store.CallbackQueue]map[int64]store.OutboxEntry
	dead      map[string]map[int64]store.DeadLetter

	// events holds each app's event log.
	events map[string]*eventLog
	// tagged holds each app's tag index: the names of the devices that
	// carry a tag, in order (see fleet.go).
	tagged map[tagKey][]string
	// broadcasts holds every app's broadcasts.
	broadcasts map[bcKey]store.Broadcast
	// targets holds the chunks of targets of broadcasts fanning out.
	targets map[chunkKey][]string

	// cmds holds every command; cmdOpen each device's open commands in
	// id order.
	cmds      map[int64]store.Command
	cmdOpen   map[devKey][]int64
	lastCmdID int64

	// jobs holds every app's jobs, with their targets and the
	// executions that have a command (see jobs.go).
	jobs map[bcKey]*memJob
}

// New returns an empty store.
func New() *Store {
	return &Store{
		now:       time.Now,
		apps:      map[string]store.App{},
		devices:   map[devKey]store.Device{},
		names:     map[string][]string{},
		shadows:   map[devKey]store.Shadow{},
		seqs:      map[seqKey]store.SeqEntry{},
		meta:      map[string][]byte{},
		msgs:      map[int64]store.Message{},
		appMsgs:   map[string][]int64{},
		queues:    map[devKey][]int64{},
		pending:   map[int64]bool{},
		outbox:    map[int64]store.OutboxEntry{},
		callbacks: map[store.CallbackQueue]map[int64]store.OutboxEntry{},
		dead:      map[string]map[int64]store.DeadLetter{},
		events:    map[string]*eventLog{},
		tagged:    map[tagKey][]string{},

		broadcasts: map[bcKey]store.Broadcast{},
		targets:    map[chunkKey][]string{},
		cmds:       map[int64]store.Command{},
		cmdOpen:    map[devKey][]int64{},
		jobs:       map[bcKey]*memJob{},
	}
}

// lock starts a call: it fails if ctx is done or the store is closed,
// and otherwise returns holding the mutex.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// clone returns a deep copy of v, made the way the other backends store
// values (JSON), so the copy is normalised as theirs would be.
func clone[T any](v T) (T, error) {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("encode %T: %w", v, err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("decode %T: %w", v, err)
	}
	return out, nil
}

// insertSorted adds v to the sorted slice s unless it is there already.
func insertSorted[T interface{ ~int64 | ~string }](s []T, v T) []T {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

// removeSorted removes v from the sorted slice s if it is there.
func removeSorted[T interface{ ~int64 | ~string }](s []T, v T) []T {
	i, found := slices.BinarySearch(s, v)
	if !found {
		return s
	}
	return slices.Delete(s, i, i+1)
}

// Close makes later calls fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.events {
		close(l.wake) // waiters return, to find the store closed
		l.wake = make(chan struct{})
	}
	return nil
}

// Ping reports whether the store is open.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Barrier returns at once: a write is visible only once its call has
// applied it whole, and being applied is all the durability this store has.
func (s *Store) Barrier(ctx context.Context) error {
	return s.Ping(ctx)
}

// Apps.

// CreateApp stores a new app; store.ErrAlreadyExists if the key is taken.
func (s *Store) CreateApp(ctx context.Context, app store.App) error {
	stored, err := clone(app)
	if err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.apps[app.Key]; ok {
		return store.ErrAlreadyExists
	}
	s.apps[app.Key] = stored
	return nil
}

// GetApp returns the app or store.ErrNotFound.
func (s *Store) GetApp(ctx context.Context, appKey string) (store.App, error) {
	if err := s.lock(ctx); err != nil {
		return store.App{}, err
	}
	defer s.mu.Unlock()
	app, ok := s.apps[appKey]
	if !ok {
		return store.App{}, store.ErrNotFound
	}
	return clone(app)
}

// ListApps returns every app ordered by key.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var apps []store.App
	for _, k := range slices.Sorted(maps.Keys(s.apps)) {
		app, err := clone(s.apps[k])
		if err != nil {
			return nil, err
		}
		apps = append(apps, app)
	}
	return apps, nil
}

// UpdateApp applies fn to a copy of the app and stores the result.
func (s *Store) UpdateApp(ctx context.Context, appKey string, fn func(*store.App) error) (store.App, error) {
	if err := s.lock(ctx); err != nil {
		return store.App{}, err
	}
	defer s.mu.Unlock()
	cur, ok := s.apps[appKey]
	if !ok {
		return store.App{}, store.ErrNotFound
	}
	app, err := clone(cur)
	if err != nil {
		return store.App{}, err
	}
	if err := fn(&app); err != nil {
		return store.App{}, err
	}
	app.Key = appKey
	stored, err := clone(app)
	if err != nil {
		return store.App{}, fmt.Errorf("update app %s: %w", appKey, err)
	}
	s.apps[appKey] = stored
	return app, nil
}

// Devices.

// CreateDevices stores the new devices, each with store.NewShadow; see
// store.Store for the per-device results.
func (s *Store) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	results := make([]error, len(devices))
	var evs []store.Event
	for i, d := range devices {
		k := devKey{appKey, d.Name}
		if _, ok := s.devices[k]; ok {
			results[i] = store.ErrAlreadyExists
			continue
		}
		evs = append(evs, store.Stamp(d.Emit, appKey, d.Name)...)
		d.AppKey, d.Emit = appKey, nil
		d.Tags = slices.Clone(d.Tags)
		s.devices[k] = d
		s.shadows[k] = store.NewShadow()
		s.names[appKey] = insertSorted(s.names[appKey], d.Name)
		s.indexTagsLocked(appKey, d.Name, nil, d.Tags)
	}
	s.appendLocked(evs)
	return results, nil
}

// GetDevice returns the device or store.ErrNotFound.
func (s *Store) GetDevice(ctx context.Context, appKey, name string) (store.Device, error) {
	if err := s.lock(ctx); err != nil {
		return store.Device{}, err
	}
	defer s.mu.Unlock()
	d, ok := s.devices[devKey{appKey, name}]
	if !ok {
		return store.Device{}, store.ErrNotFound
	}
	return d, nil
}

// UpdateDevice applies fn to a copy of the device and stores the result.
func (s *Store) UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error) {
	if err := s.lock(ctx); err != nil {
		return store.Device{}, err
	}
	defer s.mu.Unlock()
	k := devKey{appKey, name}
	d, ok := s.devices[k]
	if !ok {
		return store.Device{}, store.ErrNotFound
	}
	d.Emit = nil
	old, oldFlag := d.Tags, d.Flag
	d.Tags = slices.Clone(old)
	if err := fn(&d); err != nil {
		return store.Device{}, err
	}
	if d.Flag != oldFlag {
		s.flagEpoch.Add(1)
	}
	d.AppKey, d.Name = appKey, name
	evs := store.Stamp(d.Emit, appKey, name)
	d.Emit = nil
	d.Tags = slices.Clone(d.Tags)
	s.indexTagsLocked(appKey, name, old, d.Tags)
	s.devices[k] = d
	s.appendLocked(evs)
	return d, nil
}

// DeleteDevice removes the device, its shadow and its pending queue; its
// messages stay, as store.Store requires.
func (s *Store) DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := devKey{appKey, name}
	d, ok := s.devices[k]
	if !ok {
		return store.ErrNotFound
	}
	s.flagEpoch.Add(1)
	s.indexTagsLocked(appKey, name, d.Tags, nil)
	delete(s.devices, k)
	delete(s.shadows, k)
	delete(s.queues, k)
	s.names[appKey] = removeSorted(s.names[appKey], name)
	s.appendLocked(store.Stamp(evs, appKey, name))
	return nil
}

// ListDevices returns up to limit devices whose names start with prefix,
// in name order, after the name cursor. Next is the last name returned
// when more devices follow, "" otherwise.
// CountDevices returns how many devices the app has.
func (s *Store) CountDevices(ctx context.Context, appKey string) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return int64(len(s.names[appKey])), nil
}

func (s *Store) ListDevices(ctx context.Context, appKey, prefix, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list devices: limit %d is not positive", limit)
	}
	if err := s.lock(ctx); err != nil {
		return store.DevicePage{}, err
	}
	defer s.mu.Unlock()
	names := s.names[appKey]
	i, _ := slices.BinarySearch(names, prefix)
	if cursor != "" {
		// cursor+"\x00" is the first name after cursor: names hold no \x00.
		if j, _ := slices.BinarySearch(names, cursor+"\x00"); j > i {
			i = j
		}
	}
	var page store.DevicePage
	for ; i < len(names) && strings.HasPrefix(names[i], prefix); i++ {
		if len(page.Devices) == limit {
			page.Next = page.Devices[limit-1].Name
			break
		}
		page.Devices = append(page.Devices, s.devices[devKey{appKey, names[i]}])
	}
	return page, nil
}

// ResetPresence marks the matching online devices offline.
func (s *Store) ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for k, d := range s.devices {
		if d.Status != 1 || (node != store.AllNodes && d.Node != node) || d.LastLoginTime >= loginBefore {
			continue
		}
		if offline != nil {
			s.appendLocked(store.Stamp(offline(d), d.AppKey, d.Name))
		}
		d.Status, d.LastLogoutTime = 0, now
		s.devices[k] = d
		n++
	}
	return n, nil
}

// Meta.

// GetMeta returns the value stored under k, or store.ErrNotFound.
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	v, ok := s.meta[k]
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(v), nil
}

// PutMeta stores value under k.
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.meta[k] = append([]byte{}, value...)
	return nil
}

// CreateMeta stores value under k unless k is set.
func (s *Store) CreateMeta(ctx context.Context, k string, value []byte) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.meta[k]; ok {
		return store.ErrAlreadyExists
	}
	s.meta[k] = append([]byte{}, value...)
	return nil
}
