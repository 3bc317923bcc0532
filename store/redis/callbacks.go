package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// Callback delivery: each app has an outbox and one queue per URL, sorted
// sets of entry JSON scored by Seq, a set naming its non-empty queues, and
// its dead letters scored by id. Entries keep their Seq from the outbox to
// a queue; Seqs come from one global counter that is never reset.

// ReadOutbox returns the heads of the oldest outbox entries, merging the
// outboxes of the apps in the cb index. Reading from the start (after 0)
// also drops from the index the apps whose outbox and queues are empty.
func (s *Store) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if limit < 1 {
		return nil, nil
	}
	apps, err := s.rdb.SMembers(ctx, s.activeKey(activeCB)).Result()
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	if len(apps) == 0 {
		return nil, nil
	}
	ranges := make([]*goredis.StringSliceCmd, len(apps))
	queues := make([]*goredis.IntCmd, len(apps))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, app := range apps {
			ranges[i] = p.ZRangeByScore(ctx, s.outboxKey(app), seqRange(after, limit))
			if after == 0 {
				queues[i] = p.Exists(ctx, s.cbQueuesKey(app))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	var out []store.OutboxHead
	var idle []string
	for i, app := range apps {
		members := ranges[i].Val()
		for _, m := range members {
			h, err := store.DecodeOutboxHead([]byte(m))
			if err != nil {
				return nil, fmt.Errorf("read outbox of %s: %w", app, err)
			}
			out = append(out, h)
		}
		if after == 0 && len(members) == 0 && queues[i].Val() == 0 {
			idle = append(idle, app)
		}
	}
	slices.SortFunc(out, func(a, b store.OutboxHead) int { return cmpInt(a.Seq, b.Seq) })
	out = out[:min(len(out), limit)]
	if err := s.prune(ctx, activeCB, idle); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// seqRange is the range of up to limit Seqs above after.
func seqRange(after int64, limit int) *goredis.ZRangeBy {
	return &goredis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf", Count: int64(limit)}
}

func decodeEntries(members []string) ([]store.OutboxEntry, error) {
	out := make([]store.OutboxEntry, len(members))
	for i, m := range members {
		if err := json.Unmarshal([]byte(m), &out[i]); err != nil {
			return nil, fmt.Errorf("decode entry: %w", err)
		}
	}
	return out, nil
}

// RouteOutbox moves outbox entries into their delivery queues, one script
// per app: each app's entries move atomically, and an entry moves once
// even when routed by several workers, as the script skips entries no
// longer in the outbox. A crash between apps leaves the rest in the
// outbox to be routed again.
func (s *Store) RouteOutbox(ctx context.Context, routes []store.OutboxRoute) error {
	var order []string
	byApp := map[string][]store.OutboxRoute{}
	for _, r := range routes {
		app := r.Entry.AppKey
		if _, ok := byApp[app]; !ok {
			order = append(order, app)
		}
		byApp[app] = append(byApp[app], r)
	}
	for _, app := range order {
		keys := []string{s.outboxKey(app), s.cbQueuesKey(app)}
		index := map[string]int{} // URL → its key's index in KEYS (1-based)
		// A run of consecutive Seqs routed nowhere is removed as one
		// range: all its Seqs are listed, so the range holds nothing else.
		type run struct {
			lo, hi int64
			url    string
			q      int // index of the queue key in KEYS (1-based), 0: none
		}
		var runs []run
		for _, r := range byApp[app] {
			q, seq := 0, r.Entry.Seq
			if r.URL != "" {
				if q = index[r.URL]; q == 0 {
					keys = append(keys, s.cbQueueKey(app, r.URL))
					q = len(keys)
					index[r.URL] = q
				}
			}
			if n := len(runs); q == 0 && n > 0 && runs[n-1].q == 0 && runs[n-1].hi == seq-1 {
				runs[n-1].hi = seq
				continue
			}
			runs = append(runs, run{lo: seq, hi: seq, url: r.URL, q: q})
		}
		args := make([]any, 0, 4*len(runs))
		for _, r := range runs {
			args = append(args, r.lo, r.hi, r.url, r.q)
		}
		if err := s.run(ctx, routeScript, keys, args...).Err(); err != nil {
			return fmt.Errorf("route outbox of %s: %w", app, err)
		}
	}
	return nil
}

// CallbackQueues lists the non-empty delivery queues, by app and URL.
func (s *Store) CallbackQueues(ctx context.Context) ([]store.CallbackQueue, error) {
	apps, err := s.rdb.SMembers(ctx, s.activeKey(activeCB)).Result()
	if err != nil {
		return nil, fmt.Errorf("callback queues: %w", err)
	}
	slices.Sort(apps)
	cmds := make([]*goredis.StringSliceCmd, len(apps))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, app := range apps {
			cmds[i] = p.SMembers(ctx, s.cbQueuesKey(app))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("callback queues: %w", err)
	}
	var out []store.CallbackQueue
	for i, app := range apps {
		urls := cmds[i].Val()
		slices.Sort(urls)
		for _, u := range urls {
			out = append(out, store.CallbackQueue{AppKey: app, URL: u})
		}
	}
	return out, nil
}

// ReadCallbacks returns the oldest entries of a delivery queue. It is a
// durable read as store.Store asks: Redis shows a write once it is
// acknowledged, and an acknowledged write is durable.
func (s *Store) ReadCallbacks(ctx context.Context, q store.CallbackQueue, after int64, limit int) ([]store.OutboxEntry, error) {
	if limit < 1 {
		return nil, nil
	}
	members, err := s.rdb.ZRangeByScore(ctx, s.cbQueueKey(q.AppKey, q.URL), seqRange(after, limit)).Result()
	if err != nil {
		return nil, fmt.Errorf("read callback queue: %w", err)
	}
	out, err := decodeEntries(members)
	if err != nil {
		return nil, fmt.Errorf("read callback queue: %w", err)
	}
	return out, nil
}

// DeleteCallbacks removes entries from a delivery queue.
func (s *Store) DeleteCallbacks(ctx context.Context, q store.CallbackQueue, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	args := make([]any, 0, len(seqs)+1)
	args = append(args, q.URL)
	for _, seq := range seqs {
		args = append(args, seq)
	}
	keys := []string{s.cbQueueKey(q.AppKey, q.URL), s.cbQueuesKey(q.AppKey)}
	if err := s.run(ctx, deleteCallbacksScript, keys, args...).Err(); err != nil {
		return fmt.Errorf("delete callbacks: %w", err)
	}
	return nil
}

// MoveCallbacks moves the entries that are still in from to the end of
// the app's queue for toURL, with new Seqs.
func (s *Store) MoveCallbacks(ctx context.Context, from store.CallbackQueue, entries []store.OutboxEntry, toURL string) error {
	if len(entries) == 0 {
		return nil
	}
	last, err := s.globalStep(ctx, "", len(entries), from.AppKey, false)
	if err != nil {
		return fmt.Errorf("move callbacks: %w", err)
	}
	args := make([]any, 0, 2+3*len(entries))
	args = append(args, from.URL, toURL)
	for i, e := range entries {
		old := e.Seq
		e.Seq = last - int64(len(entries)) + 1 + int64(i)
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("move callbacks: %w", err)
		}
		args = append(args, old, e.Seq, data)
	}
	keys := []string{s.cbQueueKey(from.AppKey, from.URL), s.cbQueueKey(from.AppKey, toURL), s.cbQueuesKey(from.AppKey)}
	if err := s.run(ctx, moveCallbacksScript, keys, args...).Err(); err != nil {
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
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("put dead letter: %w", err)
	}
	args := make([]any, 0, 3+len(d.Entries))
	args = append(args, id, data, d.URL)
	for _, e := range d.Entries {
		args = append(args, e.Seq)
	}
	keys := []string{s.deadKey(d.AppKey), s.cbQueueKey(d.AppKey, d.URL), s.cbQueuesKey(d.AppKey)}
	n, err := s.run(ctx, putDeadLetterScript, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("put dead letter: %w", err)
	}
	if n == codeExists {
		return fmt.Errorf("put dead letter: id %s %w", d.ID, store.ErrAlreadyExists)
	}
	return nil
}

// ListDeadLetters returns an app's dead letters in id order.
func (s *Store) ListDeadLetters(ctx context.Context, appKey, cursor string, limit int) ([]store.DeadLetter, error) {
	if limit < 1 {
		return nil, nil
	}
	var after int64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil {
			return nil, fmt.Errorf("dead letter cursor %q: not a number", cursor)
		}
	}
	r := seqRange(after, limit)
	if cursor == "" {
		r.Min = "-inf"
	}
	members, err := s.rdb.ZRangeByScore(ctx, s.deadKey(appKey), r).Result()
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out := make([]store.DeadLetter, len(members))
	for i, m := range members {
		if err := json.Unmarshal([]byte(m), &out[i]); err != nil {
			return nil, fmt.Errorf("list dead letters: decode: %w", err)
		}
	}
	return out, nil
}

// RedeliverDeadLetter moves a dead letter's entries back to its queue
// with new Seqs; of concurrent calls, one succeeds and the others find it
// gone (store.ErrNotFound).
func (s *Store) RedeliverDeadLetter(ctx context.Context, appKey, id string) (store.DeadLetter, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return store.DeadLetter{}, store.ErrNotFound
	}
	score := strconv.FormatInt(n, 10)
	members, err := s.rdb.ZRangeByScore(ctx, s.deadKey(appKey), &goredis.ZRangeBy{Min: score, Max: score}).Result()
	if err != nil {
		return store.DeadLetter{}, fmt.Errorf("redeliver: %w", err)
	}
	if len(members) == 0 {
		return store.DeadLetter{}, store.ErrNotFound
	}
	var d store.DeadLetter
	if err := json.Unmarshal([]byte(members[0]), &d); err != nil {
		return d, fmt.Errorf("redeliver: decode: %w", err)
	}
	args := []any{n, d.URL}
	if len(d.Entries) > 0 {
		last, err := s.globalStep(ctx, "", len(d.Entries), appKey, false)
		if err != nil {
			return d, fmt.Errorf("redeliver: %w", err)
		}
		for i, e := range d.Entries {
			// A new Seq puts the entry behind what was queued meanwhile
			// and cannot collide with an entry that took its old one.
			e.Seq = last - int64(len(d.Entries)) + 1 + int64(i)
			data, err := json.Marshal(e)
			if err != nil {
				return d, fmt.Errorf("redeliver: %w", err)
			}
			args = append(args, e.Seq, data)
		}
	}
	keys := []string{s.deadKey(appKey), s.cbQueueKey(appKey, d.URL), s.cbQueuesKey(appKey), s.flagKey(appKey, activeCB)}
	res, err := s.run(ctx, redeliverScript, keys, args...).Int64()
	if err != nil {
		return d, fmt.Errorf("redeliver: %w", err)
	}
	if res == codeNotFound {
		return store.DeadLetter{}, store.ErrNotFound
	}
	if err := s.listApp(ctx, appKey, res); err != nil {
		return d, fmt.Errorf("redeliver: %w", err)
	}
	return d, nil
}
