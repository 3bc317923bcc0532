package pebble

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/store"
)

// dueFullScanEvery is how often DueCommands scans the due index from
// its start rather than from dueFloor: see dueFloor.
const dueFullScanEvery = 30 * time.Second

// dueFloor is where DueCommands starts its scan of the due index (D/):
// no entry is due before it. Without it every scan, once a second,
// stepped over the deletes of every entry that moved or ended since the
// last compaction: at 2,000 commands/s that grew by 4,000 a second, and
// a scan took 10 ms after 30 s.
//
// A write that sets a due entry notes it once committed (note): that
// lowers the floor to it, and the lowest of the scans under way to it.
// A scan (begin, end) moves the floor to the first entry it found, or
// past its bound when it found none, but not past an entry noted while
// it ran: such an entry may have been committed after the scan's
// iterator was made, which did not see it. An entry noted before a scan
// began was committed before its iterator was made, so the scan, from
// a floor at or below it, saw it. A write's due, unlike the time of its
// commit, says nothing of whether a scan saw it: the write of a
// delivered state that falls behind sets a deadline already passed.
//
// A scan made between a write's commit and its note can pass over its
// entry once; the note then lowers the floor for the next scan. A full
// scan every dueFullScanEvery is a guard besides.
type dueFloor struct {
	mu       sync.Mutex
	at       atomic.Int64 // written under mu
	scans    int          // scans under way
	lowest   int64        // the lowest due noted since scans was last 0
	lastFull atomic.Int64 // Unix ns of the last full scan
}

// note records a due entry at due set by a write that has committed
// (or failed: a write whose sync failed may be seen all the same).
func (f *dueFloor) note(due int64) {
	f.mu.Lock()
	if due < f.at.Load() {
		f.at.Store(due)
	}
	if f.scans > 0 && due < f.lowest {
		f.lowest = due
	}
	f.mu.Unlock()
}

// begin begins a scan at now, before its iterator is made, and returns
// where it starts, 0 (the start) for a full scan. A full scan is due
// every dueFullScanEvery, and when the clock is before the last one
// (set back): else none would run until the clock caught up with it. A
// floor below 0 starts at 0 as well: due keys sort as unsigned, a
// negative due after every other, so a scan from it would pass over
// every entry and raise the floor past them.
func (f *dueFloor) begin(now time.Time) (start int64, full bool) {
	f.mu.Lock()
	if f.scans == 0 {
		f.lowest = math.MaxInt64
	}
	f.scans++
	start = f.at.Load()
	f.mu.Unlock()
	ns := now.UnixNano()
	if since := ns - f.lastFull.Load(); since >= int64(dueFullScanEvery) || since < 0 {
		f.lastFull.Store(ns)
		return 0, true
	}
	return max(start, 0), false
}

// end ends a scan begun by begin. When ok (the scan completed), next is
// the due of the first entry it found, or its bound plus one: the floor
// moves to it, or to the lowest due noted meanwhile. A scan from the
// floor only raises it; a full scan may lower it too.
func (f *dueFloor) end(next int64, full, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scans--
	if !ok {
		return
	}
	next = min(next, f.lowest)
	if full || next > f.at.Load() {
		f.at.Store(next)
	}
}

// dueSet returns the due entry c's write sets, c indexed as was before
// it; false when it sets none (ended, or its entry kept).
func dueSet(c store.Command, was cmdIndexed) (int64, bool) {
	if !c.Open() || was.open && was.due == c.Due() {
		return 0, false
	}
	return c.Due(), true
}

// noteDue notes in s.due the due entry c's write set, if any, once that
// write has committed or failed; c indexed as was before it.
func (s *Store) noteDue(c store.Command, was cmdIndexed) {
	if due, ok := dueSet(c, was); ok {
		s.due.note(due)
	}
}
