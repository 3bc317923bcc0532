package pebble

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// A device's pending count is the number of its queue entries (q/): no
// key stores it. It used to be kept under c/<app>\0<device>, and every
// send and every PUBACK rewrote that key: two of the nine memtable
// inserts a delivered message cost, each in a key range of its own. The
// count is now counted from the queue the first time a write needs it
// (a queue holds at most store.MaxPending entries) and kept in the
// pendingCache, which every write of a queue updates under the device's
// stripe. A store written before keeps its c/ keys: nothing reads them,
// and DeleteDevice deletes the device's.

// pendingCount returns the device's pending count from the cache, or
// counts its queue and caches the count. The caller holds the device's
// stripe, so no write changes the queue meanwhile.
func (s *Store) pendingCount(appKey, name string) (int64, error) {
	if n, ok := s.pending.get(appKey, name); ok {
		return n, nil
	}
	var n int64
	err := s.countQueues(appKey, []string{name}, func(_ int, c int64) { n = c })
	if err != nil {
		return 0, err
	}
	s.pending.learn(appKey, name, n)
	return n, nil
}

// countQueues calls fn with the number of queue entries of each of names
// (the app's devices), counted with one iterator in key order: a
// broadcast step counts the queues of hundreds of devices, most of them
// empty, and after one device's entries the iterator stands at or after
// the next device's, so a queue it has passed needs no seek.
func (s *Store) countQueues(appKey string, names []string, fn func(i int, n int64)) error {
	if len(names) == 0 {
		return nil
	}
	prefixes := make([][]byte, len(names))
	order := make([]int, len(names))
	for i, name := range names {
		prefixes[i], order[i] = key(pQueue, appKey, name, ""), i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(prefixes[a], prefixes[b]) })
	lower := key(pQueue, appKey, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("count queues: %w", err)
	}
	seeked := false
	var last []byte
	var n int64
	for _, i := range order {
		p := prefixes[i]
		if bytes.Equal(p, last) { // a name given twice
			fn(i, n)
			continue
		}
		last = p
		// Where the iterator stands (the first entry after the queues
		// counted so far) decides: before this queue, seek it; past
		// it, the queue is empty.
		if !seeked || it.Valid() && bytes.Compare(it.Key(), p) < 0 {
			it.SeekGE(p)
			seeked = true
		}
		n = 0
		for ; it.Valid() && bytes.HasPrefix(it.Key(), p); it.Next() {
			n++
		}
		fn(i, n)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("count queues: %w", err)
	}
	return nil
}
