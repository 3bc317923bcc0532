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
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/devmsg/devmsg/store"
)

var _ store.Store = (*Store)(nil)

// FlagEpoch and PrepareStep are optional methods outside the contract,
// which the fan-out and batch sends look for (see store.BroadcastStep).
var _ interface {
	FlagEpoch() (epoch uint64, ok bool)
	PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
} = (*Store)(nil)

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
	walMinSyncInterval = time.Millisecond
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
	// deviceCounts are apps' device counts, under createMu: counted by a
	// scan on the first CountDevices of an app, then kept by the creates
	// and deletes (both hold createMu); dropped when a write's outcome is
	// unknown, so the next call counts again.
	deviceCounts map[string]int64
	appMu        sync.Mutex // serialises app creation and update
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
	// cmds holds the open and the last ended commands as last written
	// (cmdcache.go).
	cmds cmdCache
	// openCmds caches devices' open-command counts (cmdcount.go).
	openCmds cache[int]
	// due is where DueCommands starts its scan (cmddue.go).
	due dueFloor
	// disk is the free-space floor (diskfloor.go).
	disk diskFloor
	// jobs holds the jobs' locks and counts (jobexecs.go).
	jobs jobStates

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
	minFree    uint64
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
	// On a full disk Pebble cannot open (it writes a new log and
	// manifest), and retries: fail at once, saying why.
	if full := checkFree(dir, cfg.minFree); full != nil {
		return nil, fmt.Errorf("open pebble %s: %w", dir, full)
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
		// after it, in fewer, larger compactions (docs/perf-notes.md, "The
		// embedded store's memtables"). The cost: up to two memtables of
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
	// to 7 to 10, for about 1 ms more at p50 (docs/perf-notes.md, "The
	// disk"). From 500 µs to 1 ms: at 2,000 commands/s (two synced
	// commits each) the server used 0.57 to 0.61 cores instead of 0.70
	// to 0.80 and the p99 stayed at 7.7 to 8.9 ms in eight runs, where
	// it had reached 12.7 ms in four of nine; the p50 rose from 3.2 to
	// 4.6 ms. The spacing runs from the end of one sync to the start of
	// the next.
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
		return nil, fmt.Errorf("open pebble %s: %w", dir, inUse(dir, err))
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
	s.disk.dir, s.disk.floor = dir, cfg.minFree
	go s.sweep()
	if cfg.minFree > 0 {
		go s.watchDisk()
	}
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
	for _, a := range args {
		if err, ok := a.(error); ok && isNoSpace(err) {
			l.l.Error("the data directory's disk is full: exiting. Every write acknowledged is on disk; free space and start again (a start under the free-space floor is refused)")
		}
	}
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
