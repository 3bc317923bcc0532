package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

var _ store.Store = (*Store)(nil)

// DefaultPrefix is the key namespace when Options.Prefix is empty.
const DefaultPrefix = "devmsg:"

// Options says which Redis to use.
type Options struct {
	// Addrs is one address (standalone), the Sentinel addresses (with
	// MasterName), or two or more seed addresses of a Redis Cluster.
	Addrs []string
	// MasterName is the Sentinel master name; set it to use Sentinel.
	MasterName string
	Password   string
	// DB is the database number; Redis Cluster has only 0.
	DB int
	// Prefix starts every key (default DefaultPrefix), so several
	// services or test runs can share one Redis. It must not hold '{' or
	// '}', which delimit Cluster hash tags.
	Prefix string
}

// Store is the Redis backend of store.Store. Besides the client it keeps
// only a cache of apps known to be in an index that never shrinks, so any
// number of devmsg nodes can share one Redis through their Stores.
type Store struct {
	rdb    goredis.UniversalClient
	prefix string
	// global is the hash tag of the service-wide keys.
	global string
	// inline is true when the service-wide keys share the server with
	// every app's keys (not Redis Cluster): a script may then touch both,
	// and a message write takes its Seqs in the same script.
	inline bool
	now    func() time.Time
	// onlineApps remembers apps already in the global index of apps with
	// online devices, which only grows, to save a write per login.
	onlineApps sync.Map
	// fenceKey must hold fenceToken for a script or transaction to write;
	// "" when unfenced (see fence.go).
	fenceKey, fenceToken string
	// waiters wakes WaitEvents callers (see events.go).
	waiters eventWaiters
}

// Open connects to Redis and checks that it answers.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("open redis: no address")
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("open redis: prefix %q holds '{' or '}'", prefix)
	}
	rdb := goredis.NewUniversalClient(&goredis.UniversalOptions{
		Addrs:      opts.Addrs,
		MasterName: opts.MasterName,
		Password:   opts.Password,
		DB:         opts.DB,
		// No automatic retries: a write whose reply was lost may have
		// been applied, and running it again would, for instance, report
		// its own seq_no as used. The caller gets the error; a client
		// retrying with the same seq_no gets the stored response.
		MaxRetries: -1,
	})
	_, cluster := rdb.(*goredis.ClusterClient)
	s := &Store{rdb: rdb, prefix: prefix, global: "{" + prefix + "g}", inline: !cluster, now: time.Now}
	if err := s.check(ctx, opts.Addrs); err != nil {
		rdb.Close()
		return nil, err
	}
	return s, nil
}

// loadingWait is how long Open waits for a Redis that answers LOADING: one
// restarted at the same time as devmsg (a host reboot) refuses commands
// until it has read its AOF or snapshot back.
const loadingWait = 5 * time.Minute

// check makes sure Redis answers and suits the store, waiting up to
// loadingWait while it is loading its data.
func (s *Store) check(ctx context.Context, addrs []string) error {
	deadline := time.Now().Add(loadingWait)
	for {
		err := s.rdb.Ping(ctx).Err()
		if err != nil {
			err = fmt.Errorf("open redis %s: %w", strings.Join(addrs, ","), err)
		} else if err = checkEviction(ctx, s.rdb); err != nil {
			err = fmt.Errorf("open redis: %w", err)
		} else if err = s.repairActive(ctx); err != nil {
			err = fmt.Errorf("open redis: %w", err)
		}
		if err == nil || !goredis.HasErrorPrefix(err, "LOADING") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkEviction refuses a Redis that may evict keys under memory
// pressure: evicting a message, a queue or a seq_no entry loses data or
// lets a retried request run twice. Servers that do not allow CONFIG GET
// (some managed services) are not checked.
func checkEviction(ctx context.Context, rdb goredis.UniversalClient) error {
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return nil
	}
	if p, ok := cfg["maxmemory-policy"]; ok && p != "noeviction" {
		return fmt.Errorf("maxmemory-policy is %s; devmsg needs noeviction, as evicted keys would be lost data", p)
	}
	return nil
}

// Close closes the client; every acknowledged write is already in Redis.
func (s *Store) Close() error {
	s.waiters.close()
	if err := s.rdb.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("close redis: %w", err)
	}
	return nil
}

// Barrier does nothing: a read on Redis never sees a write that could
// still be lost to a crash the reader's answer outlives. Redis writes and
// fsyncs the append-only file in beforeSleep before it sends any reply of
// that event loop iteration (server.c: "must be done before
// handleClientsWithPendingWrites, in case of appendfsync=always"), so with
// appendfsync always the reply to a read comes after every write it
// reflects is on disk. Under weaker settings no write is durable at reply
// time anyway (see the package documentation).
func (s *Store) Barrier(ctx context.Context) error { return ctx.Err() }

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// Keys. See doc.go for the layout.

var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// app returns the key prefix of everything of an app: a hash tag, so all
// of it lands on one Cluster slot. The app key is escaped so that it
// cannot close the tag early, which keeps keys of different apps apart.
func (s *Store) app(appKey string) string {
	return "{" + s.prefix + "a:" + tagEscaper.Replace(appKey) + "}:"
}

func (s *Store) appKey(app string) string           { return s.app(app) + "app" }
func (s *Store) devIndexKey(app string) string      { return s.app(app) + "devs" }
func (s *Store) devKey(app, name string) string     { return s.app(app) + "d:" + name }
func (s *Store) shadowKey(app, name string) string  { return s.app(app) + "s:" + name }
func (s *Store) queueKey(app, name string) string   { return s.app(app) + "q:" + name }
func (s *Store) onlineKey(app string) string        { return s.app(app) + "online" }
func (s *Store) seqKey(app string, n int64) string  { return s.app(app) + "n:" + itoa(n) }
func (s *Store) msgKey(app string, id int64) string { return s.app(app) + "m:" + itoa(id) }
func (s *Store) expKey(app string) string           { return s.app(app) + "exp" }
func (s *Store) msgsKey(app string) string          { return s.app(app) + "msgs" }
func (s *Store) outboxKey(app string) string        { return s.app(app) + "outbox" }
func (s *Store) cbQueuesKey(app string) string      { return s.app(app) + "cbqs" }
func (s *Store) cbQueueKey(app, url string) string  { return s.app(app) + "cbq:" + url }
func (s *Store) deadKey(app string) string          { return s.app(app) + "dead" }
func (s *Store) metaKey(k string) string            { return s.prefix + "meta:" + k }

// Global keys, all under one hash tag.
func (s *Store) appsKey() string       { return s.global + ":apps" }
func (s *Store) seqCounterKey() string { return s.global + ":seq" }
func (s *Store) maxIDKey() string      { return s.global + ":maxid" }
func (s *Store) onlineAppsKey() string { return s.global + ":online" }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// idMember encodes a message id as 16 hex digits with the sign bit
// flipped, so that sorted-set members in byte order are in id order.
// (Scores are doubles and cannot hold every int64 id.)
func idMember(id int64) string {
	return fmt.Sprintf("%016x", uint64(id)^(1<<63))
}

// Retries of optimistic transactions.

// maxAttempts bounds the retries of a compare-and-set that keeps losing;
// each loss means another writer succeeded, so reaching it takes a storm
// of writes to one key.
const maxAttempts = 1000

var errContention = errors.New("too many concurrent writes; try again")

// backoff waits a little longer after each lost attempt, with jitter, so
// that writers of one key stop colliding.
func backoff(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return ctx.Err()
	}
	d := time.Duration(rand.Int64N(int64(20*time.Microsecond) << min(attempt, 9)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// watch runs fn in an optimistic transaction on keys (one slot), again
// whenever a watched key changed before EXEC.
func (s *Store) watch(ctx context.Context, fn func(*goredis.Tx) error, keys ...string) error {
	if s.fenceKey != "" {
		keys = append(keys, s.fenceKey)
		inner := fn
		fn = func(tx *goredis.Tx) error {
			if err := s.checkFence(ctx, tx); err != nil {
				return err
			}
			return inner(tx)
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		err := s.rdb.Watch(ctx, fn, keys...)
		if !errors.Is(err, goredis.TxFailedErr) {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
	return errContention
}

// Helpers.

func getJSON(ctx context.Context, c goredis.Cmdable, k string, v any) error {
	b, err := c.Get(ctx, k).Bytes()
	if errors.Is(err, goredis.Nil) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %q: %w", k, err)
	}
	return nil
}

// Apps.

// CreateApp stores a new app; store.ErrAlreadyExists if the key is taken.
// The app joins the global app index first and is then stored with SET
// NX: a crash in between leaves an index entry without an app, which
// ListApps skips.
func (s *Store) CreateApp(ctx context.Context, app store.App) error {
	data, err := json.Marshal(app)
	if err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	if err := s.rdb.ZAdd(ctx, s.appsKey(), goredis.Z{Member: app.Key}).Err(); err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	ok, err := s.rdb.SetNX(ctx, s.appKey(app.Key), data, 0).Result()
	if err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	if !ok {
		return store.ErrAlreadyExists
	}
	return nil
}

// GetApp returns the app or store.ErrNotFound.
func (s *Store) GetApp(ctx context.Context, appKey string) (store.App, error) {
	var app store.App
	if err := getJSON(ctx, s.rdb, s.appKey(appKey), &app); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return app, err
		}
		return app, fmt.Errorf("get app %s: %w", appKey, err)
	}
	return app, nil
}

// ListApps returns every app ordered by key.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	keys, err := s.rdb.ZRange(ctx, s.appsKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return s.getApps(ctx, keys)
}

// getApps reads the apps with the keys, in order, leaving out the missing.
func (s *Store) getApps(ctx context.Context, keys []string) ([]store.App, error) {
	cmds := make([]*goredis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, s.appKey(k))
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	var apps []store.App
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list apps: %w", err)
		}
		var app store.App
		if err := json.Unmarshal(b, &app); err != nil {
			return nil, fmt.Errorf("decode app %s: %w", keys[i], err)
		}
		apps = append(apps, app)
	}
	return apps, nil
}

// UpdateApp applies fn to the app in an optimistic transaction on its
// key; fn runs again if another write of the app came first.
func (s *Store) UpdateApp(ctx context.Context, appKey string, fn func(*store.App) error) (store.App, error) {
	k := s.appKey(appKey)
	var out store.App
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		var app store.App
		if err := getJSON(ctx, tx, k, &app); err != nil {
			return err
		}
		if err := fn(&app); err != nil {
			return err
		}
		app.Key = appKey
		data, err := json.Marshal(app)
		if err != nil {
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, k, data, 0)
			return nil
		}); err != nil {
			return err
		}
		out = app
		return nil
	}, k)
	if err != nil {
		return store.App{}, err
	}
	return out, nil
}

// Devices.

// CreateDevices stores the new devices, each with a new shadow, in one
// script; see store.Store for the per-device results.
func (s *Store) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	results := make([]error, len(devices))
	seen := make(map[string]bool, len(devices))
	keys := []string{s.devIndexKey(appKey)}
	var args, events []any
	var sent []int // index in devices of each device sent
	for i, d := range devices {
		if seen[d.Name] {
			results[i] = store.ErrAlreadyExists
			continue
		}
		seen[d.Name] = true
		d.AppKey = appKey
		evs := store.Stamp(d.Emit, appKey, d.Name)
		data, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("create devices in %s: %w", appKey, err)
		}
		keys = append(keys, s.devKey(appKey, d.Name), s.shadowKey(appKey, d.Name))
		args = append(args, d.Name, data, len(evs))
		events = append(events, eventArgs(evs)...)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return results, nil
	}
	keys = append(keys, s.eventKeys(appKey)...)
	args = append(append([]any{s.eventChannel(), appKey, len(sent), s.tagPrefix(appKey)}, args...), events...)
	res, err := s.run(ctx, createDevicesScript, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("create devices in %s: %w", appKey, err)
	}
	if len(res) != len(sent) {
		return nil, fmt.Errorf("create devices in %s: %d results for %d devices", appKey, len(res), len(sent))
	}
	for j, i := range sent {
		if res[j] != 0 {
			results[i] = store.ErrAlreadyExists
		}
	}
	return results, nil
}

// GetDevice returns the device or store.ErrNotFound.
func (s *Store) GetDevice(ctx context.Context, appKey, name string) (store.Device, error) {
	var d store.Device
	if err := getJSON(ctx, s.rdb, s.devKey(appKey, name), &d); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return d, err
		}
		return d, fmt.Errorf("get device %s/%s: %w", appKey, name, err)
	}
	return d, nil
}

// UpdateDevice applies fn to the device in an optimistic transaction on
// its key and keeps the app's online set in step; fn runs again if
// another write of the device came first.
func (s *Store) UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error) {
	k := s.devKey(appKey, name)
	var out store.Device
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		var d store.Device
		if err := getJSON(ctx, tx, k, &d); err != nil {
			return err
		}
		old := slices.Clone(d.Tags)
		if err := fn(&d); err != nil {
			return err
		}
		d.AppKey, d.Name = appKey, name
		evs := store.Stamp(d.Emit, appKey, name)
		d.Emit = nil
		data, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if d.Status == 1 {
			if err := s.addOnlineApp(ctx, appKey); err != nil {
				return err
			}
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, k, data, 0)
			s.indexTags(ctx, p, appKey, name, old, d.Tags)
			if d.Status == 1 {
				p.SAdd(ctx, s.onlineKey(appKey), name)
			} else {
				p.SRem(ctx, s.onlineKey(appKey), name)
			}
			s.txAppend(ctx, p, appKey, evs)
			return nil
		}); err != nil {
			return err
		}
		out = d
		return nil
	}, k)
	if err != nil {
		return store.Device{}, err
	}
	return out, nil
}

// addOnlineApp adds the app to the global index of apps that have had
// online devices, before a device of it is marked online. The index only
// grows, so an app added once by this process is not added again.
func (s *Store) addOnlineApp(ctx context.Context, appKey string) error {
	if _, ok := s.onlineApps.Load(appKey); ok {
		return nil
	}
	if err := s.rdb.SAdd(ctx, s.onlineAppsKey(), appKey).Err(); err != nil {
		return fmt.Errorf("index online app %s: %w", appKey, err)
	}
	s.onlineApps.Store(appKey, true)
	return nil
}

// DeleteDevice removes the device, its shadow, its pending queue and its
// index entries in one script; see store.Store.
func (s *Store) DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error {
	keys := append([]string{s.devKey(appKey, name), s.shadowKey(appKey, name), s.queueKey(appKey, name), s.onlineKey(appKey), s.devIndexKey(appKey)}, s.eventKeys(appKey)...)
	args := append([]any{name, s.eventChannel(), appKey, s.tagPrefix(appKey)}, eventArgs(store.Stamp(evs, appKey, name))...)
	n, err := s.run(ctx, deleteDeviceScript, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("delete device %s/%s: %w", appKey, name, err)
	}
	if n == codeNotFound {
		return store.ErrNotFound
	}
	return nil
}

// ListDevices returns up to limit devices whose names start with prefix,
// in name order, after the name cursor. Next is the last name returned
// when more devices follow, "" otherwise.
// CountDevices returns how many devices the app has: the size of its
// name index, which every node's creates and deletes keep.
func (s *Store) CountDevices(ctx context.Context, appKey string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.devIndexKey(appKey)).Result()
	if err != nil {
		return 0, fmt.Errorf("count devices of %s: %w", appKey, err)
	}
	return n, nil
}

func (s *Store) ListDevices(ctx context.Context, appKey, prefix, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list devices: limit %d is not positive", limit)
	}
	lower := "[" + prefix
	if cursor != "" && cursor >= prefix {
		lower = "(" + cursor
	}
	upper := "+"
	if end, ok := prefixEnd(prefix); ok {
		upper = "(" + end
	}
	names, err := s.rdb.ZRangeByLex(ctx, s.devIndexKey(appKey), &goredis.ZRangeBy{Min: lower, Max: upper, Count: int64(limit) + 1}).Result()
	if err != nil {
		return store.DevicePage{}, fmt.Errorf("list devices of %s: %w", appKey, err)
	}
	return s.devicePage(ctx, appKey, names, limit)
}

// devicePage reads the devices named by up to limit+1 names of an index
// read: the first limit of them, with Next set when there were more.
// Names whose device is gone (deleted since the index was read) are left
// out.
func (s *Store) devicePage(ctx context.Context, appKey string, names []string, limit int) (store.DevicePage, error) {
	var page store.DevicePage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	if len(names) == 0 {
		return page, nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.devKey(appKey, n)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return store.DevicePage{}, fmt.Errorf("list devices of %s: %w", appKey, err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // deleted since the index was read
		}
		var d store.Device
		if err := json.Unmarshal([]byte(str), &d); err != nil {
			return store.DevicePage{}, fmt.Errorf("decode %q: %w", keys[i], err)
		}
		page.Devices = append(page.Devices, d)
	}
	return page, nil
}

// prefixEnd returns the smallest string greater than every string with
// prefix; ok is false when there is none (prefix empty or all 0xff).
func prefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// Presence.

// resetWorkers is how many devices ResetPresence resets at once.
const resetWorkers = 16

// ResetPresence marks the matching devices of the online sets offline,
// each in its own optimistic transaction, and counts the devices it
// changed.
func (s *Store) ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	apps, err := s.rdb.SMembers(ctx, s.onlineAppsKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("reset presence: %w", err)
	}
	type dev struct{ app, name string }
	work := make(chan dev)
	var (
		mu       sync.Mutex
		changed  int
		firstErr error
		wg       sync.WaitGroup
	)
	for range resetWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				ok, err := s.resetDevice(ctx, d.app, d.name, node, loginBefore, now, offline)
				mu.Lock()
				if ok {
					changed++
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	var listErr error
	for _, app := range apps {
		names, err := s.rdb.SMembers(ctx, s.onlineKey(app)).Result()
		if err != nil {
			listErr = err
			break
		}
		for _, n := range names {
			work <- dev{app, n}
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil {
		firstErr = listErr
	}
	if firstErr != nil {
		return changed, fmt.Errorf("reset presence: %w", firstErr)
	}
	return changed, nil
}

// resetDevice marks one device of an online set offline and takes it out
// of the set if it matches; changed is false if it was not online (or is
// gone) or does not match.
func (s *Store) resetDevice(ctx context.Context, appKey, name string, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (changed bool, err error) {
	k := s.devKey(appKey, name)
	err = s.watch(ctx, func(tx *goredis.Tx) error {
		changed = false
		var d store.Device
		err := getJSON(ctx, tx, k, &d)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		online := err == nil && d.Status == 1
		if online && ((node != store.AllNodes && d.Node != node) || d.LastLoginTime >= loginBefore) {
			return nil // another node's, or logged in since
		}
		var data []byte
		var evs []store.Event
		if online {
			if offline != nil {
				evs = store.Stamp(offline(d), appKey, name)
			}
			d.Status, d.LastLogoutTime = 0, now
			if data, err = json.Marshal(d); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			if online {
				p.Set(ctx, k, data, 0)
			}
			p.SRem(ctx, s.onlineKey(appKey), name)
			s.txAppend(ctx, p, appKey, evs)
			return nil
		})
		changed = err == nil && online
		return err
	}, k)
	return changed, err
}

// Meta.

// GetMeta returns the value stored under k, or store.ErrNotFound.
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	v, err := s.rdb.Get(ctx, s.metaKey(k)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get meta %s: %w", k, err)
	}
	return v, nil
}

// CreateMeta stores value under k unless k is set (SET NX).
func (s *Store) CreateMeta(ctx context.Context, k string, value []byte) error {
	ok, err := s.rdb.SetNX(ctx, s.metaKey(k), value, 0).Result()
	if err != nil {
		return fmt.Errorf("create meta %s: %w", k, err)
	}
	if !ok {
		return store.ErrAlreadyExists
	}
	return nil
}

// PutMeta stores value under k.
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if err := s.rdb.Set(ctx, s.metaKey(k), value, 0).Err(); err != nil {
		return fmt.Errorf("put meta %s: %w", k, err)
	}
	return nil
}

// Client returns the store's Redis client, for the cluster coordination
// that shares the store's Redis (see package cluster). MaxRetries is off.
func (s *Store) Client() goredis.UniversalClient { return s.rdb }

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }
