package pebble

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

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
		delete(s.deviceCounts, appKey)
		return nil, fmt.Errorf("create devices in %s: %w", appKey, err)
	}
	if n, ok := s.deviceCounts[appKey]; ok {
		s.deviceCounts[appKey] = n + int64(len(seen))
	}
	return results, nil
}

// CountDevices returns how many devices the app has: a scan of its
// devices the first time, then the count the creates and deletes keep.
func (s *Store) CountDevices(ctx context.Context, appKey string) (int64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if n, ok := s.deviceCounts[appKey]; ok {
		return n, nil
	}
	lower := key(pDevice, appKey, "")
	var n int64
	err := s.scan(lower, prefixEnd(lower), func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("count devices of %s: %w", appKey, err)
	}
	if s.deviceCounts == nil {
		s.deviceCounts = map[string]int64{}
	}
	s.deviceCounts[appKey] = n
	return n, nil
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
		delete(s.deviceCounts, appKey)
		return fmt.Errorf("delete device %s/%s: %w", appKey, name, err)
	}
	if n, ok := s.deviceCounts[appKey]; ok {
		s.deviceCounts[appKey] = n - 1
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
