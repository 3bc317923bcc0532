package callback

import (
	"slices"
	"testing"
	"time"
)

// TestSeqGaps: Seqs skipped by a read become gaps, a later read of one
// fills it, and a rescan starts below the lowest gap still kept.
func TestSeqGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var g seqGaps
	g.saw(0, []int64{3, 4, 7}, t0) // 1-2 and 5-6 unseen
	if f := g.floor(t0, time.Second); f != 0 {
		t.Fatalf("floor %d, want 0 (below 1)", f)
	}
	g.saw(7, []int64{8, 12}, t0.Add(time.Second/2)) // 9-11
	g.saw(0, []int64{1, 2, 5, 10}, t0.Add(time.Second/2))
	if want := []gap{{6, 6, t0}, {9, 9, t0.Add(time.Second / 2)}, {11, 11, t0.Add(time.Second / 2)}}; !slices.Equal(g.gaps, want) {
		t.Fatalf("gaps %+v, want %+v", g.gaps, want)
	}
	if f := g.floor(t0.Add(time.Second/2), time.Second); f != 5 {
		t.Fatalf("floor %d, want 5", f)
	}
	if f := g.floor(t0.Add(time.Second), time.Second); f != 8 {
		t.Fatalf("floor once 6 is forgotten: %d, want 8", f)
	}
	g.saw(0, []int64{9, 11}, t0.Add(time.Second))
	if f := g.floor(t0.Add(time.Second), time.Second); f != 12 || g.high != 12 {
		t.Fatalf("no gaps: floor %d high %d, want 12", f, g.high)
	}
	// An empty read, then one that skips Seqs.
	g.saw(12, nil, t0)
	g.saw(12, []int64{22}, t0)
	if want := []gap{{13, 21, t0}}; !slices.Equal(g.gaps, want) {
		t.Fatalf("gaps %+v, want %+v", g.gaps, want)
	}
	// At most maxGaps, the oldest forgotten.
	g = seqGaps{}
	for i := int64(1); i <= maxGaps+2; i++ {
		g.saw(2*i-2, []int64{2 * i}, t0.Add(time.Duration(i)))
	}
	if len(g.gaps) != maxGaps || g.gaps[0].lo != 5 {
		t.Fatalf("%d gaps from %d, want %d from 5", len(g.gaps), g.gaps[0].lo, maxGaps)
	}
}
