package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/devmsg/devmsg/store"
)

var _ store.Store = (*Store)(nil)

// Key layout. App keys and device names never hold \x00, so it separates
// the parts of a key without ambiguity.
const (
	pApp    = "a/" // a/<app> → App
	pDevice = "d/" // d/<app>\0<name> → Device
	pShadow = "s/" // s/<app>\0<name> → Shadow
	pMsg    = "m/" // m/<msgid BE> → Message
	pQueue  = "q/" // q/<app>\0<device>\0<msgid BE> → empty; pending queue in msgid order
	pCount  = "c/" // c/<app>\0<device> → uint32 BE pending count
	pSeq    = "n/" // n/<app>\0<seq BE> → SeqEntry
	pSeqExp = "x/" // x/<expires ms BE><app>\0<seq BE> → empty; expiry index for the sweeper
	pMeta   = "z/" // z/<key> → raw bytes
)

const stripes = 1024

// Store is the Pebble backend.
type Store struct {
	db       *pebble.DB
	locks    [stripes]sync.Mutex // by app and device, or app and seq_no
	createMu sync.Mutex          // serialises device creation batches
	stop     chan struct{}
	done     chan struct{}
	close    sync.Once
	now      func() time.Time
}

// Open opens (creating if needed) the store in dir.
func Open(dir string) (*Store, error) {
	cache := pebble.NewCache(128 << 20)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:  cache,
		Logger: quietLogger{},
		// Measured with devmsg bench: 4 MiB (the default) flushes so often
		// that lookups cross many L0 tables; 64 MiB tables carry filter and
		// index blocks large enough to fall out of the cache. 16 MiB
		// sustained the highest send rate.
		MemTableSize: 16 << 20,
	}
	// Most Gets look up keys that do not exist yet (a new seq_no); bloom
	// filters answer those without reading blocks of every level.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open pebble %s: %w", dir, err)
	}
	s := &Store{db: db, stop: make(chan struct{}), done: make(chan struct{}), now: time.Now}
	go s.sweep()
	return s, nil
}

// quietLogger drops Pebble's informational chatter; errors still reach
// callers through returned errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Close stops the sweeper and closes the database.
func (s *Store) Close() error {
	var err error
	s.close.Do(func() {
		close(s.stop)
		<-s.done
		err = s.db.Close()
	})
	return err
}

// Ping reports whether the database is open and readable.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.get([]byte(pMeta + "ping"))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

func key(prefix string, parts ...string) []byte {
	n := len(prefix)
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, prefix...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	return b
}

func be64(v int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	return b[:]
}

func msgKey(id int64) []byte { return append([]byte(pMsg), be64(id)...) }
func seqKey(app string, seq int64) []byte {
	return append(key(pSeq, app, ""), be64(seq)...)
}

func queueKey(app, device string, id int64) []byte {
	return append(key(pQueue, app, device, ""), be64(id)...)
}

func stripe(parts ...string) int {
	h := fnv.New32a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return int(h.Sum32() % stripes)
}

func (s *Store) lockFor(parts ...string) *sync.Mutex { return &s.locks[stripe(parts...)] }

// lockSeqAndDevice locks the stripes of a seq_no (when seq is set) and of
// a device, lower index first, so two requests never wait on each other.
func (s *Store) lockSeqAndDevice(appKey string, seqNo int64, seq bool, device string) (unlock func()) {
	d := stripe(appKey, device)
	if !seq {
		s.locks[d].Lock()
		return s.locks[d].Unlock
	}
	q := stripe("seq", appKey, string(be64(seqNo)))
	if q == d {
		s.locks[d].Lock()
		return s.locks[d].Unlock
	}
	lo, hi := min(q, d), max(q, d)
	s.locks[lo].Lock()
	s.locks[hi].Lock()
	return func() { s.locks[hi].Unlock(); s.locks[lo].Unlock() }
}

func (s *Store) get(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, nil
}

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

func setJSON(b *pebble.Batch, k []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(k, data, nil)
}

func commit(b *pebble.Batch) error {
	defer b.Close()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Apps.

func (s *Store) CreateApp(ctx context.Context, app store.App) error {
	mu := s.lockFor("app", app.Key)
	mu.Lock()
	defer mu.Unlock()
	k := key(pApp, app.Key)
	if ok, err := s.exists(k); err != nil {
		return err
	} else if ok {
		return store.ErrAlreadyExists
	}
	b := s.db.NewBatch()
	if err := setJSON(b, k, app); err != nil {
		b.Close()
		return err
	}
	return commit(b)
}

func (s *Store) GetApp(ctx context.Context, appKey string) (store.App, error) {
	var app store.App
	err := s.getJSON(key(pApp, appKey), &app)
	return app, err
}

func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	var apps []store.App
	err := s.scan([]byte(pApp), func(k, v []byte) (bool, error) {
		var app store.App
		if err := json.Unmarshal(v, &app); err != nil {
			return false, err
		}
		apps = append(apps, app)
		return true, nil
	})
	return apps, err
}

func (s *Store) UpdateApp(ctx context.Context, app store.App) error {
	mu := s.lockFor("app", app.Key)
	mu.Lock()
	defer mu.Unlock()
	k := key(pApp, app.Key)
	if ok, err := s.exists(k); err != nil {
		return err
	} else if !ok {
		return store.ErrNotFound
	}
	b := s.db.NewBatch()
	if err := setJSON(b, k, app); err != nil {
		b.Close()
		return err
	}
	return commit(b)
}

// scan calls fn for each key with the prefix, in order, until fn says stop.
func (s *Store) scan(prefix []byte, fn func(k, v []byte) (bool, error)) error {
	return s.scanRange(prefix, prefixEnd(prefix), fn)
}

func (s *Store) scanRange(lower, upper []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		more, err := fn(it.Key(), v)
		if err != nil || !more {
			return err
		}
	}
	return it.Error()
}

// prefixEnd returns the smallest key greater than every key with prefix.
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

// Devices.

func (s *Store) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	results := make([]error, len(devices))
	seen := make(map[string]bool, len(devices))
	b := s.db.NewBatch()
	shadow, err := json.Marshal(store.NewShadow())
	if err != nil {
		return nil, err
	}
	for i, d := range devices {
		k := key(pDevice, appKey, d.Name)
		exists, err := s.exists(k)
		if err != nil {
			b.Close()
			return nil, err
		}
		if exists || seen[d.Name] {
			results[i] = store.ErrAlreadyExists
			continue
		}
		seen[d.Name] = true
		d.AppKey = appKey
		if err := setJSON(b, k, d); err != nil {
			b.Close()
			return nil, err
		}
		if err := b.Set(key(pShadow, appKey, d.Name), shadow, nil); err != nil {
			b.Close()
			return nil, err
		}
	}
	return results, commit(b)
}

func (s *Store) GetDevice(ctx context.Context, appKey, name string) (store.Device, error) {
	var d store.Device
	err := s.getJSON(key(pDevice, appKey, name), &d)
	return d, err
}

func (s *Store) UpdateDevice(ctx context.Context, d store.Device) error {
	mu := s.lockFor(d.AppKey, d.Name)
	mu.Lock()
	defer mu.Unlock()
	k := key(pDevice, d.AppKey, d.Name)
	if ok, err := s.exists(k); err != nil {
		return err
	} else if !ok {
		return store.ErrNotFound
	}
	b := s.db.NewBatch()
	if err := setJSON(b, k, d); err != nil {
		b.Close()
		return err
	}
	return commit(b)
}

func (s *Store) ListDevices(ctx context.Context, appKey, prefix, cursor string, limit int) (store.DevicePage, error) {
	var page store.DevicePage
	lower := key(pDevice, appKey, prefix)
	upper := prefixEnd(lower)
	if cursor != "" {
		after := append(key(pDevice, appKey, cursor), 0) // just past the cursor's key
		if bytes.Compare(after, lower) > 0 {
			lower = after
		}
	}
	err := s.scanRange(lower, upper, func(k, v []byte) (bool, error) {
		if len(page.Devices) == limit {
			page.Next = page.Devices[limit-1].Name
			return false, nil
		}
		var d store.Device
		if err := json.Unmarshal(v, &d); err != nil {
			return false, err
		}
		page.Devices = append(page.Devices, d)
		return true, nil
	})
	return page, err
}

// Shadows.

func (s *Store) GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error) {
	var sh store.Shadow
	err := s.getJSON(key(pShadow, appKey, name), &sh)
	if sh.Properties == nil {
		sh.Properties = map[string]store.Property{}
	}
	return sh, err
}

func (s *Store) SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error) {
	defer s.lockSeqAndDevice(u.AppKey, seqNo, seq != nil, u.DeviceName)()
	if seq != nil {
		if _, err := s.GetSeq(ctx, u.AppKey, seqNo); err == nil {
			return store.Shadow{}, store.ErrSeqUsed
		} else if !errors.Is(err, store.ErrNotFound) {
			return store.Shadow{}, err
		}
	}
	sh, err := s.GetShadow(ctx, u.AppKey, u.DeviceName)
	if err != nil {
		return store.Shadow{}, err
	}
	if sh.LastDesiredVersion != u.Version {
		return store.Shadow{}, store.ErrVersionConflict
	}
	for name, v := range u.Properties {
		p := sh.Properties[name]
		p.DesiredValue, p.DesiredSTime = v, u.Time
		sh.Properties[name] = p
	}
	sh.LastDesiredVersion++
	sh.LastDesiredSTime = u.Time
	b := s.db.NewBatch()
	if err := setJSON(b, key(pShadow, u.AppKey, u.DeviceName), sh); err != nil {
		b.Close()
		return store.Shadow{}, err
	}
	if seq != nil {
		if err := s.putSeq(b, u.AppKey, seqNo, *seq); err != nil {
			b.Close()
			return store.Shadow{}, err
		}
	}
	return sh, commit(b)
}

// seq_no entries.

func (s *Store) GetSeq(ctx context.Context, appKey string, seqNo int64) (store.SeqEntry, error) {
	var e store.SeqEntry
	if err := s.getJSON(seqKey(appKey, seqNo), &e); err != nil {
		return e, err
	}
	if e.ExpiresAt <= s.now().UnixMilli() {
		return store.SeqEntry{}, store.ErrNotFound
	}
	return e, nil
}

func (s *Store) PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error {
	mu := s.lockFor("seq", appKey, string(be64(seqNo)))
	mu.Lock()
	defer mu.Unlock()
	if _, err := s.GetSeq(ctx, appKey, seqNo); err == nil {
		return store.ErrSeqUsed
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	b := s.db.NewBatch()
	if err := s.putSeq(b, appKey, seqNo, e); err != nil {
		b.Close()
		return err
	}
	return commit(b)
}

func (s *Store) putSeq(b *pebble.Batch, appKey string, seqNo int64, e store.SeqEntry) error {
	if err := setJSON(b, seqKey(appKey, seqNo), e); err != nil {
		return err
	}
	return b.Set(seqExpKey(e.ExpiresAt, appKey, seqNo), nil, nil)
}

func seqExpKey(expires int64, appKey string, seqNo int64) []byte {
	k := append([]byte(pSeqExp), be64(expires)...)
	k = append(k, appKey...)
	k = append(k, 0)
	return append(k, be64(seqNo)...)
}

// sweep deletes expired seq_no entries once a minute.
func (s *Store) sweep() {
	defer close(s.done)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.sweepOnce()
		}
	}
}

func (s *Store) sweepOnce() error {
	now := s.now().UnixMilli()
	upper := append([]byte(pSeqExp), be64(now)...)
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	err := s.scanRange([]byte(pSeqExp), upper, func(k, _ []byte) (bool, error) {
		rest := k[len(pSeqExp)+8:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 || len(rest) != i+9 {
			return true, b.Delete(k, nil)
		}
		appKey, seqNo := string(rest[:i]), int64(binary.BigEndian.Uint64(rest[i+1:]))
		mu := s.lockFor("seq", appKey, string(be64(seqNo)))
		mu.Lock()
		// The entry may have been replaced with a later expiry; keep it then.
		var e store.SeqEntry
		if err := s.getJSON(seqKey(appKey, seqNo), &e); err == nil && e.ExpiresAt <= now {
			_ = b.Delete(seqKey(appKey, seqNo), nil)
		}
		mu.Unlock()
		n++
		return n < 10000, b.Delete(k, nil)
	})
	if err != nil || n == 0 {
		return err
	}
	return b.Commit(pebble.NoSync) // losing a sweep only delays it
}

// Messages.

func (s *Store) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	defer s.lockSeqAndDevice(m.AppKey, seqNo, seq != nil, m.DeviceName)()
	if seq != nil {
		if _, err := s.GetSeq(ctx, m.AppKey, seqNo); err == nil {
			return store.ErrSeqUsed
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	b := s.db.NewBatch()
	if m.State == store.StatePending {
		ck := key(pCount, m.AppKey, m.DeviceName)
		count, err := s.count(ck)
		if err != nil {
			b.Close()
			return err
		}
		if count >= store.MaxPending {
			b.Close()
			return store.ErrQueueFull
		}
		if err := b.Set(ck, be64(count+1), nil); err != nil {
			b.Close()
			return err
		}
		if err := b.Set(queueKey(m.AppKey, m.DeviceName, m.ID), nil, nil); err != nil {
			b.Close()
			return err
		}
	}
	if err := setJSON(b, msgKey(m.ID), m); err != nil {
		b.Close()
		return err
	}
	if seq != nil {
		if err := s.putSeq(b, m.AppKey, seqNo, *seq); err != nil {
			b.Close()
			return err
		}
	}
	return commit(b)
}

func (s *Store) count(k []byte) (int64, error) {
	v, err := s.get(k)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("counter %q has %d bytes", k, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func (s *Store) GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error) {
	var m store.Message
	if err := s.getJSON(msgKey(id), &m); err != nil {
		return store.Message{}, err
	}
	if m.AppKey != appKey {
		return store.Message{}, store.ErrNotFound
	}
	return m, nil
}

func (s *Store) PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error) {
	var out []store.Message
	prefix := key(pQueue, appKey, deviceName, "")
	err := s.scan(prefix, func(k, _ []byte) (bool, error) {
		id := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		var m store.Message
		if err := s.getJSON(msgKey(id), &m); err != nil {
			return false, err
		}
		out = append(out, m)
		return len(out) < limit, nil
	})
	return out, err
}

// Meta.

func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	return s.get([]byte(pMeta + k))
}

func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	b := s.db.NewBatch()
	if err := b.Set([]byte(pMeta+k), value, nil); err != nil {
		b.Close()
		return err
	}
	return commit(b)
}
