package pebble

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Admission of commands (store.AdmitCommand): whether each device
// exists and how many commands it has open, read under its stripe.
//
// s.openCmds caches devices' open command counts. Every write that
// adds or removes a device's O/ key holds its stripe and moves or drops
// its entry after the commit, so an entry is never staler than the
// database; a device without one is counted from its keys.

// admission is what AdmitCommand needs of a device.
type admission struct {
	exists bool
	open   int
}

// admitCommands returns cmds of appKey as they are to be stored, each
// queued one passed through store.AdmitCommand against its device as
// stored, and the devices as read; under the devices' stripes.
func (s *Store) admitCommands(appKey string, cmds []store.Command) ([]store.Command, map[string]admission, error) {
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
		return nil, nil, fmt.Errorf("create commands: %w", err)
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
	return out, devs, nil
}

// noteOpened moves the cached open counts of the devices out's open
// commands were written to, once the write committed (ok): a device
// whose count the write read (devs) has it moved, any other dropped.
// Under the devices' stripes.
func (s *Store) noteOpened(appKey string, out []store.Command, devs map[string]admission, ok bool) {
	added := map[string]int{}
	for _, c := range out {
		if c.Open() {
			added[c.DeviceName]++
		}
	}
	for n, k := range added {
		if d, known := devs[n]; ok && known && d.exists {
			s.openCmds.put(appKey, n, d.open+k)
		} else {
			s.openCmds.drop(appKey, n)
		}
	}
}

// noteEnded takes a command that ended from its device's cached open
// count, once the write committed (ok; else the count is dropped).
// Under the device's stripe.
func (s *Store) noteEnded(appKey, device string, ok bool) {
	if n, cached := s.openCmds.get(appKey, device); ok && cached && n > 0 {
		s.openCmds.put(appKey, device, n-1)
		return
	}
	s.openCmds.drop(appKey, device)
}

// openCount counts the device's open commands; under its stripe.
func (s *Store) openCount(app, device string) (int, error) {
	if n, ok := s.openCmds.get(app, device); ok {
		return n, nil
	}
	p := cmdOpenPrefix(app, device)
	n := 0
	err := s.scan(p, prefixEnd(p), func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	})
	if err == nil {
		s.openCmds.put(app, device, n)
	}
	return n, err
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
