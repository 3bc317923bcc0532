package pebble

import (
	"sync/atomic"
	"time"
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
// A write that sets a due entry lowers the floor to it before its
// commit (lower). A scan starting at floor f raises it to the first
// entry it finds, or past its bound when it finds none, unless a write
// lowered it meanwhile (raise). A write that sets an entry at or after
// f, committed after the scan's iterator was made and due before what
// the scan found, is missed: its due was in the scan's past when it was
// written (dues are set from the write's own clock, at least a second
// ahead), so only a commit held up over a second does that. A full scan
// every dueFullScanEvery finds such an entry.
type dueFloor struct {
	at       atomic.Int64
	lastFull atomic.Int64 // Unix ns of the last full scan
}

// lower lowers the floor to due.
func (f *dueFloor) lower(due int64) {
	for {
		cur := f.at.Load()
		if due >= cur || f.at.CompareAndSwap(cur, due) {
			return
		}
	}
}

// from returns where a scan at now starts, and the floor it read, for
// raise: 0 (the start) when a full scan is due. A full scan is due too
// when the clock is before the last one (set back): else none would run
// until the clock caught up with it. A floor below 0 starts at 0 as
// well: due keys sort as unsigned, a negative due after every other, so
// a scan from it would pass over every entry and raise the floor past
// them.
func (f *dueFloor) from(now time.Time) (start, read int64) {
	read = f.at.Load()
	ns := now.UnixNano()
	if since := ns - f.lastFull.Load(); since >= int64(dueFullScanEvery) || since < 0 {
		f.lastFull.Store(ns)
		return 0, read
	}
	return max(read, 0), read
}

// raise moves the floor from read, as a scan read it, to next, unless a
// write lowered it meanwhile.
func (f *dueFloor) raise(read, next int64) {
	if next > read {
		f.at.CompareAndSwap(read, next)
	}
}
