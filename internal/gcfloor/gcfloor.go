// Package gcfloor keeps the Go heap goal at or above a floor while the
// live heap is small.
//
// The runtime collects when the heap reaches the live heap times
// (1 + GOGC/100). With a live heap of a few MiB and tens of MiB a second
// allocated (requests, packets, store writes), that is a collection
// every second or two, and on two cores each one takes a quarter of the
// CPU and assists from busy goroutines for tens of milliseconds: requests
// that arrive meanwhile wait. Collecting when the heap reaches the floor
// instead spaces them out; once the live heap is large enough that GOGC
// alone puts the goal above the floor, GOGC applies unchanged. The heap
// is never let grow past max(floor, what GOGC alone allows).
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// maxPercent bounds the GOGC the floor sets: a live heap of a few KiB
// would otherwise ask for millions.
const maxPercent = 100_000

// Floor tunes GOGC after each collection (Start).
type Floor struct {
	floor   uint64
	percent int
	set     atomic.Int64 // the GOGC last set
	stopped atomic.Bool
	sample  []metrics.Sample
}

// Start sets GOGC to percent and, after every collection, raises it so
// that the heap goal is at least floor bytes while the live heap is
// small. Stop ends the tuning.
func Start(floor uint64, percent int) *Floor {
	f := &Floor{floor: floor, percent: percent, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	f.apply(percent)
	f.arm()
	return f
}

// Stop ends the tuning and sets GOGC back to Start's percent.
func (f *Floor) Stop() {
	f.stopped.Store(true)
	debug.SetGCPercent(f.percent)
}

// Percent returns the GOGC last set.
func (f *Floor) Percent() int { return int(f.set.Load()) }

// sentinel is an object nothing refers to, whose finalizer runs after
// the collection that finds it unreachable: once per cycle.
type sentinel struct{ _ *int }

func (f *Floor) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if f.stopped.Load() {
			return
		}
		f.tune()
		f.arm()
	})
}

func (f *Floor) tune() {
	metrics.Read(f.sample)
	for _, s := range f.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
	}
	roots := f.sample[1].Value.Uint64() + f.sample[2].Value.Uint64()
	p := Percent(f.sample[0].Value.Uint64(), roots, f.floor, f.percent)
	if old := f.set.Load(); p != int(old) && (p > int(old)*21/20 || p < int(old)*19/20 || p == f.percent) {
		f.apply(p)
	}
}

func (f *Floor) apply(p int) {
	debug.SetGCPercent(p)
	f.set.Store(int64(p))
}

// Percent is the GOGC that puts the heap goal of a live heap of live
// bytes at floor, or percent when that is more. roots is the stacks and
// globals the last collection scanned: the runtime applies GOGC to them
// as to the live heap (goal = live + (live+roots)*GOGC/100), and with
// many goroutines they can be several times the live heap.
func Percent(live, roots, floor uint64, percent int) int {
	if live == 0 || live >= floor {
		return percent
	}
	p := (floor - live) * 100 / (live + roots)
	if p > maxPercent {
		return maxPercent
	}
	return max(int(p), percent)
}
