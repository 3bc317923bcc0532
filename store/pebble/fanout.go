package pebble

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// seekEach calls fn with the value of each of keys that exists, all
// under prefix, read with one iterator that seeks them in key order: a
// fan-out chunk's hundreds of point reads cost far less this way than as
// as many Gets, each of which sets up its own iterator over every level.
func (s *Store) seekEach(prefix []byte, keys [][]byte, fn func(i int, v []byte) error) error {
	if len(keys) == 0 {
		return nil
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("iterate %q: %w", prefix, err)
	}
	// After the first seek the iterator stands at the first key at or
	// after the previous one asked for (or past the end). A key at or
	// before where it stands needs no seek: it is there or absent; one
	// step forward finds the next key when the keys asked for are
	// adjacent, as a broadcast chunk's sorted targets are. A seek costs a
	// search of every memtable and level: a 100,000-device broadcast
	// spent a tenth of its CPU seeking devices and their pending counts.
	seeked := false
	for _, i := range order {
		k := keys[i]
		if seeked && it.Valid() && bytes.Compare(it.Key(), k) < 0 {
			it.Next()
		}
		if !seeked || it.Valid() && bytes.Compare(it.Key(), k) < 0 {
			it.SeekGE(k)
			seeked = true
		}
		if !it.Valid() || !bytes.Equal(it.Key(), k) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("read %q: %w", k, err)
		}
		if err := fn(i, v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("iterate %q: %w", prefix, err)
	}
	return nil
}

// GetDevices returns the app's devices of names that exist, in the order
// of names: cached ones from the cache, the others read in one pass.
func (s *Store) GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	devs := make([]store.Device, len(names))
	found := make([]bool, len(names))
	var keys [][]byte
	var at []int // keys[j] is the device of names[at[j]]
	for i, n := range names {
		if d, ok := s.devices.get(appKey, n); ok {
			devs[i], found[i] = d, true
			continue
		}
		keys = append(keys, key(pDevice, appKey, n))
		at = append(at, i)
	}
	err := s.seekEach(key(pDevice, appKey, ""), keys, func(j int, v []byte) error {
		i := at[j]
		if err := decodeDevice(v, &devs[i]); err != nil {
			return fmt.Errorf("decode device %q: %w", names[i], err)
		}
		found[i] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get devices of %s: %w", appKey, err)
	}
	out := devs[:0]
	for i := range devs {
		if found[i] {
			out = append(out, devs[i])
		}
	}
	return out, nil
}

// FlagEpoch returns the store's flag epoch (see store.BroadcastStep's
// Epoch), an optional method outside the store.Store contract that the
// fan-out and batch sends look for; ok is always true. UpdateDevice and
// DeleteDevice bump it under the device's stripe, which CreateMessages
// takes to check the device, before their write and again after it. The first bump alone let a
// reader take the epoch after it and read the device before the write
// was visible (or from the cache, updated after the write): the old flag
// under an epoch that then did not change again.
func (s *Store) FlagEpoch() (uint64, bool) { return s.flagEpoch.Load(), true }

// EnabledNames scans the app's devices (or the tag's index entries and
// the devices they name) and decodes of each device only its flag.
func (s *Store) EnabledNames(ctx context.Context, appKey, tag string) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	out := []string{}
	enabled := func(v []byte) (bool, error) {
		flag, err := deviceFlag(v)
		return flag == store.FlagEnabled, err
	}
	devPrefix := key(pDevice, appKey, "")
	if tag == "" {
		err := s.scan(devPrefix, prefixEnd(devPrefix), func(k, v []byte) (bool, error) {
			ok, err := enabled(v)
			if err != nil {
				return false, fmt.Errorf("decode %q: %w", k, err)
			}
			if ok {
				out = append(out, string(k[len(devPrefix):]))
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("enabled devices of %s: %w", appKey, err)
		}
		return out, nil
	}
	tagPrefix := key(pTag, appKey, tag, "")
	var names []string
	var keys [][]byte
	err := s.scan(tagPrefix, prefixEnd(tagPrefix), func(k, _ []byte) (bool, error) {
		name := string(k[len(tagPrefix):])
		names, keys = append(names, name), append(keys, key(pDevice, appKey, name))
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("enabled devices of %s tagged %s: %w", appKey, tag, err)
	}
	on := make([]bool, len(names))
	err = s.seekEach(devPrefix, keys, func(i int, v []byte) error {
		ok, err := enabled(v)
		if err != nil {
			return fmt.Errorf("decode device %q: %w", names[i], err)
		}
		on[i] = ok
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("enabled devices of %s tagged %s: %w", appKey, tag, err)
	}
	for i, n := range names {
		if on[i] {
			out = append(out, n)
		}
	}
	return out, nil
}
