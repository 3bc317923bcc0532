package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
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
		if got := Percent(c.live, c.floor, 400); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB floor) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
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
