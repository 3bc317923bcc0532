package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// tagPrefix is the start of the keys of the app's tag index: one sorted
// set per tag (all scores 0, so members sort by name), on the app's slot.
func (s *Store) tagPrefix(app string) string   { return s.app(app) + "tag:" }
func (s *Store) tagKey(app, tag string) string { return s.tagPrefix(app) + tag }

// indexTags queues on p the changes of name's tag index entries from the
// tags old to the tags now.
func (s *Store) indexTags(ctx context.Context, p goredis.Pipeliner, app, name string, old, now []string) {
	for _, t := range old {
		if !slices.Contains(now, t) {
			p.ZRem(ctx, s.tagKey(app, t), name)
		}
	}
	for _, t := range now {
		if !slices.Contains(old, t) {
			p.ZAdd(ctx, s.tagKey(app, t), goredis.Z{Member: name})
		}
	}
}

// ListTagged returns up to limit of the app's devices tagged tag, in name
// order, after the name cursor: a range of the tag's sorted set and one
// MGET of the devices it names.
func (s *Store) ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list tagged devices: limit %d is not positive", limit)
	}
	lower := "-"
	if cursor != "" {
		lower = "(" + cursor
	}
	names, err := s.rdb.ZRangeByLex(ctx, s.tagKey(appKey, tag), &goredis.ZRangeBy{Min: lower, Max: "+", Count: int64(limit) + 1}).Result()
	if err != nil {
		return store.DevicePage{}, fmt.Errorf("list devices of %s tagged %s: %w", appKey, tag, err)
	}
	return s.devicePage(ctx, appKey, names, limit)
}

// GetDevices reads the devices of names with one MGET on the app's slot.
func (s *Store) GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error) {
	if len(names) == 0 {
		return nil, nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.devKey(appKey, n)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("get devices of %s: %w", appKey, err)
	}
	out := make([]store.Device, 0, len(names))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // no such device
		}
		var d store.Device
		if err := json.Unmarshal([]byte(str), &d); err != nil {
			return nil, fmt.Errorf("decode %q: %w", keys[i], err)
		}
		out = append(out, d)
	}
	return out, nil
}

// EnabledNames reads the app's device index (or the tag's) and the
// devices it names, a thousand at a time.
func (s *Store) EnabledNames(ctx context.Context, appKey, tag string) ([]string, error) {
	out := []string{}
	cursor := ""
	for {
		var page store.DevicePage
		var err error
		if tag == "" {
			page, err = s.ListDevices(ctx, appKey, "", cursor, 1000)
		} else {
			page, err = s.ListTagged(ctx, appKey, tag, cursor, 1000)
		}
		if err != nil {
			return nil, err
		}
		for _, d := range page.Devices {
			if d.Flag == store.FlagEnabled {
				out = append(out, d.Name)
			}
		}
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
}

// CountBroadcast is store.Fleet's, by listing the messages.
func (s *Store) CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (store.BroadcastCounts, error) {
	return store.CountByListing(ctx, s.ListMessages, appKey, id, first, last)
}
