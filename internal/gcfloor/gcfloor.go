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
//
// A process that goes quiet after a burst would otherwise keep the
// burst's garbage, up to the floor, until its next collection, and the
// runtime returns to the OS only memory above the heap goal: a floor
// far above the live heap would show as resident memory long after the
// load. So once the process has allocated next to nothing for a few
// seconds with much garbage on the heap, the floor collects and returns
// the free memory to the OS, once per quiet spell.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// maxPercent bounds the GOGC the floor sets: a live heap of a few KiB
// would otherwise ask for millions.
const maxPercent = 100_000

// Quiet is when the process counts as quiet: it allocated under
// QuietRate bytes a second for QuietFor; a quiet process with more than
// TrimGarbage bytes of garbage on its heap is trimmed.
const (
	QuietRate   = 1 << 20
	QuietFor    = 3 * time.Second
	TrimGarbage = 32 << 20
)

// Floor tunes GOGC after each collection (Start).
type Floor struct {
	floor   uint64
	percent int
	set     atomic.Int64 // the GOGC last set
	stopped atomic.Bool
	stop    chan struct{}
	sample  []metrics.Sample
	trims   atomic.Int64
}

// Start sets GOGC to percent and, after every collection, raises it so
// that the heap goal is at least floor bytes while the live heap is
// small. Stop ends the tuning.
func Start(floor uint64, percent int) *Floor {
	f := &Floor{floor: floor, percent: percent, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	f.apply(percent)
	f.arm()
	f.stop = make(chan struct{})
	go f.watchQuiet(time.Second)
	return f
}

// Stop ends the tuning and sets GOGC back to Start's percent.
func (f *Floor) Stop() {
	if f.stopped.Swap(true) {
		return
	}
	close(f.stop)
	debug.SetGCPercent(f.percent)
}

// Trims counts the collections a quiet spell made.
func (f *Floor) Trims() int64 { return f.trims.Load() }

// watchQuiet looks every interval at what the process allocated and at
// the garbage on its heap, and trims it once per quiet spell (see the
// package's documentation).
func (f *Floor) watchQuiet(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	var q quiet
	for {
		select {
		case <-f.stop:
			return
		case now := <-t.C:
			metrics.Read(s)
			if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 || s[2].Value.Kind() != metrics.KindUint64 {
				return
			}
			garbage := s[1].Value.Uint64() - min(s[1].Value.Uint64(), s[2].Value.Uint64())
			if q.observe(now, s[0].Value.Uint64(), garbage) {
				debug.FreeOSMemory()
				f.trims.Add(1)
			}
		}
	}
}

// quiet follows the allocations of a process to say when to trim it.
type quiet struct {
	last    time.Time // the last observation
	allocs  uint64    // the process's allocations so far, at last
	quietAt time.Time // since when it has been quiet; zero while busy
	trimmed bool      // trimmed in this quiet spell
}

// observe takes the allocations so far, at now, and the garbage on the
// heap, and reports whether to trim: when the process has been quiet
// for QuietFor and holds more than TrimGarbage of garbage, once a spell.
func (q *quiet) observe(now time.Time, allocs, garbage uint64) bool {
	if !q.last.IsZero() {
		rate := float64(allocs-q.allocs) / max(now.Sub(q.last).Seconds(), 1e-3)
		switch {
		case rate >= QuietRate:
			q.quietAt, q.trimmed = time.Time{}, false
		case q.quietAt.IsZero():
			q.quietAt = q.last
		}
	}
	q.last, q.allocs = now, allocs
	if q.quietAt.IsZero() || q.trimmed || now.Sub(q.quietAt) < QuietFor || garbage <= TrimGarbage {
		return false
	}
	q.trimmed = true
	return true
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
