package pebble

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Admission of commands (store.AdmitCommand): whether each device
// exists and how many commands it has open (openCount, kept in
// s.openCmds: cmdcount.go), read under its stripe.

// admission is what AdmitCommand needs of a device.
type admission struct {
	exists bool
	open   int
}

// admitCommands returns cmds of appKey as they are to be stored, each
// queued one passed through store.AdmitCommand against its device as
// stored; under the devices' stripes.
func (s *Store) admitCommands(appKey string, cmds []store.Command) ([]store.Command, error) {
	out := slices.Clone(cmds)
	var names []string
	for i := range out {
		out[i].AppKey = appKey
		if out[i].State == store.CmdQueued {
			names = append(names, out[i].DeviceName)
		}
	}
	devs, err := s.readAdmission(appKey, names)
	if err != nil {
		return nil, fmt.Errorf("create commands: %w", err)
	}
	opened := map[string]int{}
	for i := range out {
		c := &out[i]
		if c.State != store.CmdQueued {
			continue
		}
		d := devs[c.DeviceName]
		if store.AdmitCommand(c, d.exists, d.open+opened[c.DeviceName]) {
			opened[c.DeviceName]++
		}
	}
	return out, nil
}

// batchAdmission is how many devices a write names from which
// readAdmission reads those it has not cached with two iterators, in
// key order, rather than with a lookup and a scan each (which took
// three quarters of a 1,000-command write).
const batchAdmission = 8

// readAdmission reads whether each named device of appKey exists and
// how many commands it has open; under the devices' stripes.
func (s *Store) readAdmission(appKey string, names []string) (map[string]admission, error) {
	out := make(map[string]admission, len(names))
	if len(names) < batchAdmission {
		for _, n := range names {
			exists, err := s.deviceExists(appKey, n)
			if err != nil || !exists {
				out[n] = admission{}
				if err != nil {
					return nil, err
				}
				continue
			}
			open, err := s.openCount(appKey, n)
			if err != nil {
				return nil, err
			}
			out[n] = admission{true, open}
		}
		return out, nil
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	if err := s.readExists(appKey, names, out); err != nil {
		return nil, err
	}
	var uncounted []string
	for _, n := range names {
		if a := out[n]; a.exists {
			if open, ok := s.openCmds.get(appKey, n); ok {
				out[n] = admission{true, open}
			} else {
				uncounted = append(uncounted, n)
			}
		}
	}
	err := s.seekRanges(key(pCmdOpen, appKey, ""), uncounted, func(n string) []byte { return cmdOpenPrefix(appKey, n) },
		func(n string, it *pebble.Iterator, p []byte) bool {
			if it.Valid() && bytes.HasPrefix(it.Key(), p) {
				out[n] = admission{true, out[n].open + 1}
				return true
			}
			return false
		})
	if err != nil {
		return nil, err
	}
	for _, n := range uncounted {
		s.openCmds.put(appKey, n, out[n].open)
	}
	return out, nil
}

// readExists marks in out which of names (sorted) exist: the cached
// ones, then the others with one iterator.
func (s *Store) readExists(appKey string, names []string, out map[string]admission) error {
	var unknown []string
	var keys [][]byte
	for _, n := range names {
		if _, ok := s.devices.get(appKey, n); ok {
			out[n] = admission{exists: true}
		} else {
			unknown = append(unknown, n)
			keys = append(keys, key(pDevice, appKey, n))
		}
	}
	return s.seekEach(key(pDevice, appKey, ""), keys, func(i int, _ []byte) error {
		out[unknown[i]] = admission{exists: true}
		return nil
	})
}

// seekRanges seeks one iterator over the keys under prefix to key(n)
// for each of names, in order (so each seek moves forward), and calls
// fn there and after each Next for as long as fn asks for one.
func (s *Store) seekRanges(prefix []byte, names []string, key func(string) []byte, fn func(n string, it *pebble.Iterator, k []byte) (next bool)) error {
	if len(names) == 0 {
		return nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("iterate %q: %w", prefix, err)
	}
	for _, n := range names {
		k := key(n)
		for ok := it.SeekGE(k); fn(n, it, k) && ok; ok = it.Next() {
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("iterate %q: %w", prefix, err)
	}
	return nil
}
