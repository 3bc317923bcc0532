package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/devmsg/devmsg/store"
)

var _ store.Store = (*Store)(nil)

// ErrClosed is returned by every method called after Close. (Pebble
// itself panics on a closed database.)
var ErrClosed = errors.New("pebble store closed")

// stripes is the number of locks that serialise read-check-write
// sequences. Writers to different devices or seq_nos rarely share one, so
// their synced commits overlap and Pebble's group commit shares fsyncs.
// walMinSyncInterval spaces WAL syncs while at least groupCommitters
// commits are in flight (see Open): whenever a commit finds another one
// waiting for its sync.
const (
	walMinSyncInterval = 500 * time.Microsecond
	groupCommitters    = 2
)

const stripes = 1024

// sweepChunk is how many expiry index entries the sweeper deletes per
// batch, and so the most stripes it holds at once.
const sweepChunk = 128

// Store is the Pebble backend. Every write is one batch committed with
// pebble.Sync, and the lock guarding a read-check-write sequence is held
// until that commit has been synced.
type Store struct {
	db *pebble.DB
	// committing counts synced commits in flight, from before Pebble
	// publishes them to after their fsync (see WALMinSyncInterval and Barrier).
	committing atomic.Int64
	// lazyWrites counts the commits of writeLazy, and lazySynced how many
	// of them a Barrier is known to have synced (see fleetmsgs.go).
	lazyWrites, lazySynced atomic.Int64
	// outboxSeq is the Seq of the last outbox entry handed out.
	outboxSeq atomic.Int64
	// flagEpoch is FlagEpoch: bumped under a device's stripe when its
	// flag changes or it is deleted.
	flagEpoch atomic.Uint64
	// locks guard devices (shadow, pending count) and seq_nos, indexed by
	// deviceStripe and seqStripe. Whoever holds several takes them in
	// ascending index order, so no two holders wait on each other.
	locks [stripes]sync.Mutex
	// createMu serialises device creation: one batch checks and writes
	// up to a thousand names.
	createMu sync.Mutex
	appMu    sync.Mutex // serialises app creation and update
	// appSettings caches apps' callback settings (recordfilter.go).
	appSettings appSettings
	deadMu      sync.Mutex // serialises dead-letter filing and redelivery
	metaMu      sync.Mutex // serialises CreateMeta with the other meta writes
	// bcMu serialises the writes of broadcasts (taken before any stripe).
	bcMu sync.Mutex
	// stepped is the broadcast the last step wrote (fleetmsgs.go),
	// under bcMu.
	stepped steppedBroadcast
	devices deviceCache
	// pending caches each device's pending-queue count; it is read and
	// written only under the device's lock, like the counter key itself.
	pending pendingCache
	// events is the event log's state (see events.go).
	events eventLogs
	// msgs holds the messages written last, for their next writer
	// (msgcache.go).
	msgs msgCache

	log        *slog.Logger
	now        func() time.Time
	sweepEvery time.Duration
	stop, done chan struct{}

	// closeMu is held shared by every call and exclusively by Close, so
	// Close waits for calls in flight and later calls get ErrClosed.
	closeMu   sync.RWMutex
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Option configures Open.
type Option func(*config)

type config struct {
	cacheSize  int64
	logger     *slog.Logger
	sweepEvery time.Duration
	now        func() time.Time
	fs         vfs.FS
}

// WithCacheSize sets the size in bytes of Pebble's block cache
// (default 128 MiB).
func WithCacheSize(bytes int64) Option { return func(c *config) { c.cacheSize = bytes } }

// WithLogger sets where Pebble's errors go (default slog.Default()).
// Pebble's informational messages about flushes and compactions are
// dropped.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSweepInterval sets how often expired seq_no entries are deleted
// (default one minute); 0 turns the sweeper off. Expired entries count as
// absent either way; sweeping only reclaims their space.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// withFS replaces the disk in tests, such as with a file system that can
// simulate a crash.
func withFS(fs vfs.FS) Option { return func(c *config) { c.fs = fs } }

// withClock replaces time.Now in tests.
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Open opens the store in dir, creating it if needed.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := config{cacheSize: 128 << 20, logger: slog.Default(), sweepEvery: time.Minute, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	cache := pebble.NewCache(cfg.cacheSize)
	defer cache.Unref() // the DB holds its own reference
	po := &pebble.Options{
		Cache:  cache,
		Logger: logger{cfg.logger},
		// A memtable holds about 100,000 messages (a message and its
		// index entries take about 640 bytes there), and L0 is compacted
		// once it holds 8 flushes instead of 4. With 16 MiB and 4, a
		// burst (a broadcast to 100,000 devices, a minute of batch sends)
		// flushed every 25,000 messages and, as the store was small,
		// rewrote the whole of the last level at every fourth flush: the
		// compactions took a third of the CPU of a broadcast and 11% of a
		// fan-out. Now a burst of that size fills about one memtable and is compacted
		// after it, in fewer, larger compactions (BENCHMARKS.md, "Pebble's
		// memtable and L0 threshold"). The cost: up to two memtables of
		// memory (128 MiB) beside the block cache, and a longer WAL to
		// replay after a crash.
		MemTableSize:          64 << 20,
		L0CompactionThreshold: 8,
		FS:                    cfg.fs,
	}
	s := &Store{}
	// Under load, space WAL syncs apart so more concurrent commits share
	// each fdatasync: profiles showed the syncs at a seventh of server
	// CPU when requests arrive too sparsely to group on their own (an
	// fdatasync costs 65 to 170 µs of CPU on the bench machine). Pebble
	// delays a lone commit by about a millisecond when this is set, so it
	// applies only while another commit is in flight. Every commit still
	// waits for its sync. From 8 commits in flight down to 2: at 2,000
	// deliveries/s on a quiet machine the server used 0.57 to 0.66 cores
	// instead of 0.79 to 0.84 and the delivery p99 fell from 13 to 15 ms
	// to 7 to 10, for about 1 ms more at p50 (BENCHMARKS.md, "The WAL's
	// sync spacing").
	po.WALMinSyncInterval = func() time.Duration {
		if s.committing.Load() >= groupCommitters {
			return walMinSyncInterval
		}
		return 0
	}
	// Most Gets look up keys that do not exist yet (a new seq_no); bloom
	// filters answer those without reading blocks of every level.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("open pebble %s: %w", dir, err)
	}
	// Fields one by one: Pebble's goroutines already read s.committing.
	s.db, s.log, s.now, s.sweepEvery = db, cfg.logger, cfg.now, cfg.sweepEvery
	last, err := s.lastKey(pOutbox)
	if err != nil {
		db.Close()
		return nil, err
	}
	if last != nil {
		s.outboxSeq.Store(int64(binary.BigEndian.Uint64(last[len(pOutbox):])))
	}
	if err := s.restoreCallbackSeq(); err != nil {
		db.Close()
		return nil, err
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.sweep()
	return s, nil
}

// logger passes Pebble's errors to slog.
type logger struct{ l *slog.Logger }

func (logger) Infof(string, ...any) {}

func (l logger) Errorf(format string, args ...any) {
	l.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf must not return. Pebble calls it when it cannot go on safely (a
// failed WAL write, a broken invariant); it exits like Pebble's own
// logger does, because a panic in a request goroutine would be recovered
// and the service would keep serving from a store that gave up.
func (l logger) Fatalf(format string, args ...any) {
	l.l.Error("pebble fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Close waits for calls in flight, stops the sweeper and closes the
// database. Later calls, Close included, do nothing more.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		s.closed = true
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close pebble: %w", err)
		}
	})
	return s.closeErr
}

// enter starts a call: it fails if ctx is done or the store is closed,
// and otherwise keeps Close waiting until the matching exit. Methods call
// it once and then use only unexported helpers, which never enter again:
// a second shared lock could deadlock behind a waiting Close.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) exit() { s.closeMu.RUnlock() }

// Ping reports whether the database is open and readable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	if _, err := s.get([]byte(pMeta + "ping")); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// Locks.

// FNV-1a, inline so that picking a stripe allocates nothing.
const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

func fnvString(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * fnvPrime
	}
	return h * fnvPrime // a zero byte ends each part: ("ab","c") and ("a","bc") differ
}

func deviceStripe(app, device string) int {
	return int(fnvString(fnvString(fnvString(fnvOffset, "d"), app), device) % stripes)
}

func seqStripe(app string, seq int64) int {
	h := fnvString(fnvString(fnvOffset, "n"), app)
	for i := range 8 {
		h = (h ^ uint32(byte(seq>>(8*i)))) * fnvPrime
	}
	return int(h % stripes)
}

// lock2 locks the stripes a and b (which may be equal) in ascending order
// and returns the function that unlocks them.
func (s *Store) lock2(a, b int) (unlock func()) {
	if a == b {
		s.locks[a].Lock()
		return s.locks[a].Unlock
	}
	lo, hi := min(a, b), max(a, b)
	s.locks[lo].Lock()
	s.locks[hi].Lock()
	return func() { s.locks[hi].Unlock(); s.locks[lo].Unlock() }
}

// lockDeviceAndSeq locks a device and, when withSeq, a seq_no.
func (s *Store) lockDeviceAndSeq(app, device string, seqNo int64, withSeq bool) (unlock func()) {
	d := deviceStripe(app, device)
	if !withSeq {
		return s.lock2(d, d)
	}
	return s.lock2(d, seqStripe(app, seqNo))
}

// Reads and writes.

func (s *Store) get(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", k, err)
	}
	out := bytes.Clone(v)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("get %q: %w", k, err)
	}
	return out, nil
}

// getJSON decodes the value at k into v; store.ErrNotFound if k is absent.
func (s *Store) getJSON(k []byte, v any) error {
	b, err := s.get(k)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %q: %w", k, err)
	}
	return nil
}

func (s *Store) exists(k []byte) (bool, error) {
	_, err := s.get(k)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func set(b *pebble.Batch, k, v []byte) error {
	if err := b.Set(k, v, nil); err != nil {
		return fmt.Errorf("set %q: %w", k, err)
	}
	return nil
}

func setJSON(b *pebble.Batch, k []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", k, err)
	}
	return set(b, k, data)
}

// write builds one batch with fill and commits it synced. Pebble makes the
// batch visible to readers before its fsync completes; callers that must
// not act on an unsynced write hold a stripe lock across write, and
// readers that pass on what they read call Barrier first. Every synced
// commit goes through here, so committing counts them for Barrier.
func (s *Store) write(fill func(b *pebble.Batch) error) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := fill(b); err != nil {
		return err
	}
	s.committing.Add(1)
	defer s.committing.Add(-1)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// barrierRecord is the WAL record Barrier writes: a LogData record, which
// replay skips and no read sees, so it only orders and syncs the log.
var barrierRecord = []byte("devmsg barrier")

// Barrier returns once every write visible to reads made before the call
// is durable. A write becomes visible when Pebble publishes its batch,
// which can come before its WAL fsync; its commit is counted in
// committing from before it is published until its fsync is done. So
// with none counted, every visible write is already durable. Otherwise
// Barrier commits a synced LogData record: Pebble writes WAL records in
// sequence order before it publishes them (commitPipeline.prepare) and
// closes and syncs a WAL before starting the next, so the fsync that
// covers the new record covers every write published before it. The
// record goes through group commit like any write, so concurrent
// barriers and writes share fsyncs.
func (s *Store) Barrier(ctx context.Context) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	return s.barrier()
}

// barrier is Barrier for a caller inside enter: the durable reads
// (GetSeq, ReadCallbacks) call it after their read, holding no lock.
func (s *Store) barrier() error {
	// Unsynced writes (writeLazy) count too: loaded first, so every one
	// counted was published before the record below.
	lazy := s.lazyWrites.Load()
	if s.committing.Load() == 0 && lazy == s.lazySynced.Load() {
		return nil
	}
	if err := s.db.LogData(barrierRecord, pebble.Sync); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	s.markLazySynced(lazy)
	return nil
}

// scan calls fn for each key in [lower, upper), in order, until fn says
// stop. k and v are valid only during the call.
func (s *Store) scan(lower, upper []byte, fn func(k, v []byte) (more bool, err error)) error {
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("iterate %q: %w", lower, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("read %q: %w", it.Key(), err)
		}
		more, err := fn(it.Key(), v)
		if err != nil || !more {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("iterate %q: %w", lower, err)
	}
	return nil
}

// prefixEnd returns the smallest key greater than every key with prefix,
// or nil (no bound) when there is none.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Apps.

// CreateApp stores a new app; store.ErrAlreadyExists if the key is taken.
func (s *Store) CreateApp(ctx context.Context, app store.App) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.appMu.Lock()
	defer s.appMu.Unlock()
	k := key(pApp, app.Key)
	if ok, err := s.exists(k); err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	} else if ok {
		return store.ErrAlreadyExists
	}
	s.appSettings.changed(app.Key)
	defer s.appSettings.changed(app.Key)
	if err := s.write(func(b *pebble.Batch) error { return setJSON(b, k, app) }); err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	return nil
}

// GetApp returns the app or store.ErrNotFound.
func (s *Store) GetApp(ctx context.Context, appKey string) (store.App, error) {
	if err := s.enter(ctx); err != nil {
		return store.App{}, err
	}
	defer s.exit()
	var app store.App
	if err := s.getJSON(key(pApp, appKey), &app); err != nil {
		return store.App{}, err
	}
	return app, nil
}

// ListApps returns every app ordered by key.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var apps []store.App
	err := s.scan([]byte(pApp), prefixEnd([]byte(pApp)), func(k, v []byte) (bool, error) {
		var app store.App
		if err := json.Unmarshal(v, &app); err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		apps = append(apps, app)
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// UpdateApp applies fn to the app under the app lock and stores the result.
func (s *Store) UpdateApp(ctx context.Context, appKey string, fn func(*store.App) error) (store.App, error) {
	if err := s.enter(ctx); err != nil {
		return store.App{}, err
	}
	defer s.exit()
	s.appMu.Lock()
	defer s.appMu.Unlock()
	k := key(pApp, appKey)
	var app store.App
	if err := s.getJSON(k, &app); err != nil {
		return store.App{}, err
	}
	if err := fn(&app); err != nil {
		return store.App{}, err
	}
	app.Key = appKey
	s.appSettings.changed(appKey)
	defer s.appSettings.changed(appKey)
	if err := s.write(func(b *pebble.Batch) error { return setJSON(b, k, app) }); err != nil {
		return store.App{}, fmt.Errorf("update app %s: %w", appKey, err)
	}
	return app, nil
}

// Devices.

// CreateDevices stores the new devices, each with store.NewShadow, in one
// batch; see store.Store for the per-device results.
func (s *Store) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	shadow, err := json.Marshal(store.NewShadow())
	if err != nil {
		return nil, fmt.Errorf("encode shadow: %w", err)
	}
	// No device stripes: nothing else writes a device that does not exist
	// yet, and existing devices are never written here.
	s.createMu.Lock()
	defer s.createMu.Unlock()
	results := make([]error, len(devices))
	seen := make(map[string]bool, len(devices))
	err = s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) {
		var evs []store.Event
		for i, d := range devices {
			k := key(pDevice, appKey, d.Name)
			exists, err := s.exists(k)
			if err != nil {
				return nil, err
			}
			if exists || seen[d.Name] {
				results[i] = store.ErrAlreadyExists
				continue
			}
			seen[d.Name] = true
			evs = append(evs, store.Stamp(d.Emit, appKey, d.Name)...)
			d.AppKey = appKey
			if err := setJSON(b, k, d); err != nil {
				return nil, err
			}
			if err := set(b, key(pShadow, appKey, d.Name), shadow); err != nil {
				return nil, err
			}
			if err := indexTags(b, appKey, d.Name, nil, d.Tags); err != nil {
				return nil, err
			}
		}
		return evs, nil // an empty batch commits without an fsync
	})
	if err != nil {
		return nil, fmt.Errorf("create devices in %s: %w", appKey, err)
	}
	return results, nil
}

// GetDevice returns the device or store.ErrNotFound.
func (s *Store) GetDevice(ctx context.Context, appKey, name string) (store.Device, error) {
	if err := s.enter(ctx); err != nil {
		return store.Device{}, err
	}
	defer s.exit()
	if d, ok := s.devices.get(appKey, name); ok {
		return d, nil
	}
	// Read and cache under the device's lock, so an UpdateDevice cannot
	// slip between the read and the insert and leave a stale entry.
	defer s.lock2(deviceStripe(appKey, name), deviceStripe(appKey, name))()
	k := key(pDevice, appKey, name)
	v, err := s.get(k)
	if err != nil {
		return store.Device{}, err
	}
	var d store.Device
	if err := decodeDevice(v, &d); err != nil {
		return store.Device{}, fmt.Errorf("decode %q: %w", k, err)
	}
	s.devices.put(d.AppKey, d.Name, d)
	return d, nil
}

// UpdateDevice applies fn to the device under its lock and stores the
// result; the device cache follows.
func (s *Store) UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error) {
	if err := s.enter(ctx); err != nil {
		return store.Device{}, err
	}
	defer s.exit()
	defer s.lock2(deviceStripe(appKey, name), deviceStripe(appKey, name))()
	k := key(pDevice, appKey, name)
	d, ok := s.devices.get(appKey, name)
	if !ok {
		if err := s.getJSON(k, &d); err != nil {
			return store.Device{}, err
		}
	}
	d.Emit = nil
	old, oldFlag := d.Tags, d.Flag
	d.Tags = slices.Clone(old)
	if err := fn(&d); err != nil {
		return store.Device{}, err
	}
	d.AppKey, d.Name = appKey, name
	evs := store.Stamp(d.Emit, appKey, name)
	d.Emit = nil
	if d.Flag != oldFlag {
		// Before the write, under the stripe, and again once the new
		// flag is in the database and the cache: see FlagEpoch.
		s.flagEpoch.Add(1)
		defer s.flagEpoch.Add(1) // runs before the stripe's unlock
	}
	err := s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) {
		if err := setJSON(b, k, d); err != nil {
			return nil, err
		}
		if err := indexTags(b, appKey, name, old, d.Tags); err != nil {
			return nil, err
		}
		if d.Status == 1 {
			return evs, set(b, key(pOnline, appKey, name), nil)
		}
		return evs, b.Delete(key(pOnline, appKey, name), nil)
	})
	if err != nil {
		s.devices.drop(appKey, name) // the batch may or may not have landed
		return store.Device{}, fmt.Errorf("update device %s/%s: %w", appKey, name, err)
	}
	s.devices.put(appKey, name, d)
	return d, nil
}

// DeleteDevice removes the device with its shadow, pending queue, pending
// count and online-index entry in one synced batch; see store.Store.
func (s *Store) DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	// createMu first, as CreateDevices holds it while it checks names
	// without device stripes: a create of the name is wholly before the
	// delete or wholly after it. Nothing holds a stripe while taking
	// createMu, so the order cannot deadlock.
	s.createMu.Lock()
	defer s.createMu.Unlock()
	defer s.lock2(deviceStripe(appKey, name), deviceStripe(appKey, name))()
	k := key(pDevice, appKey, name)
	var d store.Device
	if err := s.getJSON(k, &d); errors.Is(err, store.ErrNotFound) {
		return err
	} else if err != nil {
		return fmt.Errorf("delete device %s/%s: %w", appKey, name, err)
	}
	// Under the stripe, before the write and again once the device is
	// gone from the database and the caches: see FlagEpoch.
	s.flagEpoch.Add(1)
	defer s.flagEpoch.Add(1) // runs before the stripe's unlock
	// Queue entries are written only under the device's stripe, which is
	// held, so the scan sees them all. Normally the caller has emptied
	// the queue already.
	var queued [][]byte
	prefix := key(pQueue, appKey, name, "")
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		queued = append(queued, bytes.Clone(k))
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("delete device %s/%s: %w", appKey, name, err)
	}
	err = s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) {
		keys := append(queued, k, key(pShadow, appKey, name), key(pCount, appKey, name), key(pOnline, appKey, name))
		for _, t := range d.Tags {
			keys = append(keys, tagKey(appKey, t, name))
		}
		for _, dk := range keys {
			if err := b.Delete(dk, nil); err != nil {
				return nil, fmt.Errorf("delete %q: %w", dk, err)
			}
		}
		return store.Stamp(evs, appKey, name), nil
	})
	// Dropped even on failure: the batch may or may not have landed, and
	// a miss reads the database again under the stripe.
	s.devices.drop(appKey, name)
	s.pending.drop(appKey, name)
	if err != nil {
		return fmt.Errorf("delete device %s/%s: %w", appKey, name, err)
	}
	return nil
}

// ListDevices returns up to limit devices whose names start with prefix,
// in name order, after the name cursor. Next is the last name returned
// when more devices follow, "" otherwise.
func (s *Store) ListDevices(ctx context.Context, appKey, prefix, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list devices: limit %d is not positive", limit)
	}
	if err := s.enter(ctx); err != nil {
		return store.DevicePage{}, err
	}
	defer s.exit()
	lower := key(pDevice, appKey, prefix)
	upper := prefixEnd(lower)
	if cursor != "" {
		// cursor+"\x00" is the first name after cursor: names hold no \x00.
		if after := append(key(pDevice, appKey, cursor), 0); bytes.Compare(after, lower) > 0 {
			lower = after
		}
	}
	var page store.DevicePage
	err := s.scan(lower, upper, func(k, v []byte) (bool, error) {
		if len(page.Devices) == limit {
			page.Next = page.Devices[limit-1].Name
			return false, nil
		}
		var d store.Device
		if err := json.Unmarshal(v, &d); err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		page.Devices = append(page.Devices, d)
		return true, nil
	})
	if err != nil {
		return store.DevicePage{}, fmt.Errorf("list devices of %s: %w", appKey, err)
	}
	return page, nil
}

// Meta.

// GetMeta returns the value stored under k, or store.ErrNotFound.
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	return s.get([]byte(pMeta + k))
}

// PutMeta stores value under k.
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if err := s.write(func(b *pebble.Batch) error { return set(b, []byte(pMeta+k), value) }); err != nil {
		return fmt.Errorf("put meta %s: %w", k, err)
	}
	return nil
}

// CreateMeta stores value under k unless k is set.
func (s *Store) CreateMeta(ctx context.Context, k string, value []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if _, err := s.get([]byte(pMeta + k)); err == nil {
		return store.ErrAlreadyExists
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("create meta %s: %w", k, err)
	}
	if err := s.write(func(b *pebble.Batch) error { return set(b, []byte(pMeta+k), value) }); err != nil {
		return fmt.Errorf("create meta %s: %w", k, err)
	}
	return nil
}

// lastKey returns a copy of the greatest key with prefix, nil if none.
func (s *Store) lastKey(prefix string) ([]byte, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd([]byte(prefix))})
	if err != nil {
		return nil, fmt.Errorf("last key of %q: %w", prefix, err)
	}
	defer it.Close()
	if !it.Last() {
		return nil, it.Error()
	}
	return bytes.Clone(it.Key()), nil
}

// ResetPresence marks the matching devices of the online index offline,
// a chunk of devices per synced batch.
func (s *Store) ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	total := 0
	from := []byte(pOnline)
	for {
		var keys [][]byte
		err := s.scan(from, prefixEnd([]byte(pOnline)), func(k, _ []byte) (bool, error) {
			keys = append(keys, bytes.Clone(k))
			return len(keys) < sweepChunk, nil
		})
		if err != nil {
			return total, fmt.Errorf("reset presence: %w", err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		n, err := s.resetChunk(keys, node, loginBefore, now, offline)
		total += n
		if err != nil {
			return total, fmt.Errorf("reset presence: %w", err)
		}
		// Devices left online keep their index entries: go on after them.
		from = append(keys[len(keys)-1], 0)
	}
}

// resetChunk resets the devices of the online index keys that match, under
// their locks, in one batch, and counts them.
func (s *Store) resetChunk(keys [][]byte, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	type dev struct{ app, name string }
	devs := make([]dev, len(keys))
	held := make([]int, len(keys))
	for i, k := range keys {
		app, name, _ := strings.Cut(string(k[len(pOnline):]), "\x00")
		devs[i] = dev{app, name}
		held[i] = deviceStripe(app, name)
	}
	slices.Sort(held)
	held = slices.Compact(held)
	for _, i := range held {
		s.locks[i].Lock()
	}
	defer func() {
		for _, i := range held {
			s.locks[i].Unlock()
		}
	}()
	var changed []dev
	err := s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) {
		var evs []store.Event
		for i, d := range devs {
			var dv store.Device
			err := s.getJSON(key(pDevice, d.app, d.name), &dv)
			if errors.Is(err, store.ErrNotFound) {
				if err := b.Delete(keys[i], nil); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			if (node != store.AllNodes && dv.Node != node) || dv.LastLoginTime >= loginBefore {
				continue
			}
			if err := b.Delete(keys[i], nil); err != nil {
				return nil, err
			}
			if offline != nil {
				evs = append(evs, store.Stamp(offline(dv), d.app, d.name)...)
			}
			dv.Status, dv.LastLogoutTime = 0, now
			if err := setJSON(b, key(pDevice, d.app, d.name), dv); err != nil {
				return nil, err
			}
			changed = append(changed, d)
		}
		return evs, nil
	})
	for _, d := range changed {
		s.devices.drop(d.app, d.name)
	}
	if err != nil {
		return 0, err
	}
	return len(changed), nil
}
