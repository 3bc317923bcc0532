package pebble

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// pTag is the tag index: t/<app>\0<tag>\0<name> → empty, written in the
// batch of every device write that changes the device's tags.
const pTag = "t/"

func tagKey(app, tag, name string) []byte { return key(pTag, app, tag, name) }

// indexTags adds to b the changes of name's tag index entries from the
// tags old to the tags now.
func indexTags(b *pebble.Batch, app, name string, old, now []string) error {
	for _, t := range old {
		if !slices.Contains(now, t) {
			if err := b.Delete(tagKey(app, t, name), nil); err != nil {
				return fmt.Errorf("untag %s/%s: %w", app, name, err)
			}
		}
	}
	for _, t := range now {
		if !slices.Contains(old, t) {
			if err := set(b, tagKey(app, t, name), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListTagged returns up to limit of the app's devices tagged tag, in name
// order, after the name cursor: a scan of the tag's index entries and a
// read of each device it names.
func (s *Store) ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list tagged devices: limit %d is not positive", limit)
	}
	if err := s.enter(ctx); err != nil {
		return store.DevicePage{}, err
	}
	defer s.exit()
	prefix := key(pTag, appKey, tag, "")
	lower, upper := prefix, prefixEnd(prefix)
	if cursor != "" {
		lower = append(tagKey(appKey, tag, cursor), 0) // names hold no \x00
	}
	var names []string
	err := s.scan(lower, upper, func(k, _ []byte) (bool, error) {
		names = append(names, string(k[len(prefix):]))
		return len(names) <= limit, nil
	})
	if err != nil {
		return store.DevicePage{}, fmt.Errorf("list devices of %s tagged %s: %w", appKey, tag, err)
	}
	var page store.DevicePage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	for _, n := range names {
		d, ok := s.devices.get(appKey, n)
		if !ok {
			if err := s.getJSON(key(pDevice, appKey, n), &d); err != nil {
				return store.DevicePage{}, fmt.Errorf("list devices of %s tagged %s: %w", appKey, tag, err)
			}
		}
		page.Devices = append(page.Devices, d)
	}
	return page, nil
}
