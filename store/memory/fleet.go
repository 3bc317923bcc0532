package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/store"
)

// tagKey names one tag of one app in the tag index.
type tagKey struct{ app, tag string }

// indexTagsLocked moves name's entries in the app's tag index from the
// tags old to the tags now; s.mu is held.
func (s *Store) indexTagsLocked(app, name string, old, now []string) {
	for _, t := range old {
		if !slices.Contains(now, t) {
			k := tagKey{app, t}
			if s.tagged[k] = removeSorted(s.tagged[k], name); len(s.tagged[k]) == 0 {
				delete(s.tagged, k)
			}
		}
	}
	for _, t := range now {
		k := tagKey{app, t}
		s.tagged[k] = insertSorted(s.tagged[k], name)
	}
}

// ListTagged returns up to limit of the app's devices tagged tag, in name
// order, after the name cursor.
func (s *Store) ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (store.DevicePage, error) {
	if limit < 1 {
		return store.DevicePage{}, fmt.Errorf("list tagged devices: limit %d is not positive", limit)
	}
	if err := s.lock(ctx); err != nil {
		return store.DevicePage{}, err
	}
	defer s.mu.Unlock()
	names := s.tagged[tagKey{appKey, tag}]
	i := 0
	if cursor != "" {
		i, _ = slices.BinarySearch(names, cursor+"\x00")
	}
	var page store.DevicePage
	for ; i < len(names); i++ {
		if len(page.Devices) == limit {
			page.Next = page.Devices[limit-1].Name
			break
		}
		page.Devices = append(page.Devices, s.devices[devKey{appKey, names[i]}])
	}
	return page, nil
}
