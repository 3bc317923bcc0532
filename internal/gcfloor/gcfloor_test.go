package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{8 * mib, 256 * mib, 3100},    // goal 8 + 8*31 = 256 MiB
		{64 * mib, 256 * mib, 400},    // GOGC alone gives 320 MiB
		{51 * mib, 256 * mib, 401},    // just under: the floor
		{300 * mib, 256 * mib, 400},   // above the floor
		{0, 256 * mib, 400},           // nothing measured yet
		{1024, 256 * mib, maxPercent}, // bounded
		{256 * mib, 256 * mib, 400},   // at the floor
		{8 * mib, 0, 400},             // no floor
		{128 * mib, 256 * mib, 400},   // GOGC above
		{100 * mib, 1024 * mib, 924},  // (1024-100)/100
		{4 * mib, 16 * mib, 400},      // 300 < 400
		{2 * mib, 16 * mib, 700},      // 2 + 2*7 = 16
	} {
		if got := Percent(c.live, 0, c.floor, 400); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB floor) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
	}
	// Stacks and globals count: 8 + (8+24)*7.75 = 256 MiB.
	if got := Percent(8*mib, 24*mib, 256*mib, 400); got != 775 {
		t.Errorf("Percent(8 MiB live, 24 MiB roots, 256 MiB floor) = %d, want 775", got)
	}
}

// TestFloorTunesAfterCollections checks that a floor far above the live
// heap raises GOGC once a collection has run, and that Stop restores it.
func TestFloorTunesAfterCollections(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	f := Start(1<<30, 100)
	for i := 0; i < 50 && f.Percent() == 100; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if f.Percent() <= 100 {
		t.Fatalf("GOGC %d after collections with a 1 GiB floor, want more than 100", f.Percent())
	}
	if got := debug.SetGCPercent(100); got != f.Percent() {
		t.Fatalf("the runtime's GOGC is %d, the floor says %d", got, f.Percent())
	}
	f.Stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC %d after Stop, want 100", got)
	}
}

// TestFloorGoalCountsStacks holds the heap goal to the floor when the
// goroutine stacks are large beside the live heap: the runtime applies
// GOGC to the live heap, the stacks and the globals together, so a
// GOGC computed from the live heap alone put the goal many times above
// the floor.
func TestFloorGoalCountsStacks(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	const floor = 256 << 20
	release := make(chan struct{})
	started := make(chan struct{})
	for range 128 {
		go func() { growStack(256, started, release) }()
		<-started
	}
	defer close(release)
	f := Start(floor, 100)
	defer f.Stop()
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/heap/live:bytes"}}
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond) // the finalizer tunes after the cycle
	}
	runtime.GC() // with the tuned GOGC
	metrics.Read(s)
	goal, stacks, live := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
	if stacks < 16<<20 {
		t.Skipf("only %d MiB of stacks", stacks>>20)
	}
	if goal > floor*11/10 {
		t.Fatalf("heap goal %d MiB with a %d MiB floor (live %d MiB, stacks %d MiB, GOGC %d)",
			goal>>20, floor>>20, live>>20, stacks>>20, f.Percent())
	}
}

// growStack grows the goroutine's stack by about n KiB, then parks.
func growStack(n int, started chan<- struct{}, release <-chan struct{}) byte {
	var buf [1 << 10]byte
	buf[n%len(buf)] = byte(n)
	if n > 0 {
		return growStack(n-1, started, release) + buf[0]
	}
	started <- struct{}{}
	<-release
	return buf[0]
}

// TestQuietTrimsOncePerSpell follows a process that allocates, goes
// quiet with garbage on its heap, and is trimmed once QuietFor has
// passed, and not again until it has been busy.
func TestQuietTrimsOncePerSpell(t *testing.T) {
	const mib = 1 << 20
	start := time.Unix(1_800_000_000, 0)
	var q quiet
	var allocs uint64
	step := func(s int, rate, garbage uint64) bool {
		allocs += rate
		return q.observe(start.Add(time.Duration(s)*time.Second), allocs, garbage)
	}
	at := 0
	for ; at < 5; at++ { // busy: 50 MiB/s
		if step(at, 50*mib, 200*mib) {
			t.Fatalf("trimmed at %d s while busy", at)
		}
	}
	for ; at < 7; at++ { // quiet since the last busy second (4 s), not for QuietFor yet
		if step(at, mib/4, 200*mib) {
			t.Fatalf("trimmed at %d s, quiet since 4 s", at)
		}
	}
	if !step(at, mib/4, 200*mib) {
		t.Fatalf("not trimmed at %d s, quiet since 4 s with 200 MiB of garbage", at)
	}
	for at++; at < 20; at++ {
		if step(at, 0, 200*mib) {
			t.Fatalf("trimmed again at %d s in the same quiet spell", at)
		}
	}
	for end := at + 2; at < end; at++ { // busy again
		step(at, 50*mib, 200*mib)
	}
	for end := at + 5; at < end; at++ { // quiet with little garbage
		if step(at, 0, TrimGarbage) {
			t.Fatalf("trimmed at %d s with only %d MiB of garbage", at, TrimGarbage/mib)
		}
	}
	if !step(at, 0, TrimGarbage+1) {
		t.Fatalf("not trimmed at %d s once the garbage passed %d MiB", at, TrimGarbage/mib)
	}
}

// TestQuietProcessIsTrimmed leaves garbage under a floor far above it and
// checks that the watcher collects it once the test goes quiet.
func TestQuietProcessIsTrimmed(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	f := Start(1<<30, 100)
	defer f.Stop()
	runtime.GC() // the floor tunes GOGC after a collection
	for range 96 {
		sink = make([]byte, 1<<20)
	}
	sink = nil
	deadline := time.Now().Add(QuietFor + 10*time.Second)
	for f.Trims() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no trim %v after 96 MiB of garbage and quiet", QuietFor+10*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var sink []byte
