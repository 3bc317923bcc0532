package callback

import (
	"slices"
	"time"
)

// seqGaps tracks which outbox Seqs below the highest one read the router
// has not seen. Writes may become visible out of Seq order, so such a Seq
// may belong to a straggler that a later read finds; others belong to
// nothing (a Seq taken for a delivery queue, or by a write that failed).
// A rescan needs to start only below the lowest gap, not from the start
// of the outbox: in Pebble, reading from the start walks the tombstones
// of every entry routed since the last compaction.
type seqGaps struct {
	high int64 // the highest Seq read
	gaps []gap // disjoint, in Seq order
}

// gap is a run of Seqs not seen, lo to hi, since the read that found it.
type gap struct {
	lo, hi int64
	since  time.Time
}

// maxGaps bounds the gaps remembered; the oldest go first. A straggler in
// a forgotten gap waits for the next full rescan.
const maxGaps = 10000

// saw records a read from after that returned seqs, in order: every Seq
// in (after, last of seqs] not among them, and above high, is a new gap;
// a Seq inside a gap closes it there.
func (g *seqGaps) saw(after int64, seqs []int64, now time.Time) {
	next := max(after, g.high) + 1 // the lowest Seq a new gap may hold
	for _, seq := range seqs {
		if seq <= g.high {
			g.fill(seq)
			continue
		}
		if seq > next {
			g.gaps = append(g.gaps, gap{lo: next, hi: seq - 1, since: now})
		}
		next, g.high = seq+1, seq
	}
	if n := len(g.gaps) - maxGaps; n > 0 {
		g.forget(n)
	}
}

// fill takes seq out of the gap that holds it, if one does.
func (g *seqGaps) fill(seq int64) {
	i, found := slices.BinarySearchFunc(g.gaps, seq, func(x gap, seq int64) int {
		switch {
		case x.hi < seq:
			return -1
		case x.lo > seq:
			return 1
		}
		return 0
	})
	if !found {
		return
	}
	x := g.gaps[i]
	switch {
	case x.lo == x.hi:
		g.gaps = slices.Delete(g.gaps, i, i+1)
	case seq == x.lo:
		g.gaps[i].lo++
	case seq == x.hi:
		g.gaps[i].hi--
	default:
		g.gaps[i].hi = seq - 1
		g.gaps = slices.Insert(g.gaps, i+1, gap{lo: seq + 1, hi: x.hi, since: x.since})
	}
}

// forget drops the n oldest gaps: the first, as gaps are found in Seq
// order and a gap split in two keeps its time.
func (g *seqGaps) forget(n int) {
	g.gaps = slices.Delete(g.gaps, 0, n)
}

// floor returns where a rescan starts: below the lowest gap found within
// keep before now, or at high when there is none. Older gaps are
// forgotten.
func (g *seqGaps) floor(now time.Time, keep time.Duration) int64 {
	g.gaps = slices.DeleteFunc(g.gaps, func(x gap) bool { return now.Sub(x.since) >= keep })
	if len(g.gaps) == 0 {
		return g.high
	}
	return g.gaps[0].lo - 1
}
