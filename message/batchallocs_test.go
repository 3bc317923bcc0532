package message

import (
	"math"
	"runtime"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestBatchSendAllocations: a batch send on Pebble (Plan and Commit)
// allocates a few objects a message, not one for each of its records,
// keys, map entries and msgid lists (it once took about ten a message,
// when the batch send was a quarter of the server's CPU in fan-out and
// allocation a tenth of that).
func TestBatchSendAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself")
	}
	const n = 200
	ctx, app, svc, names := batchFixture(t, n)
	send := BatchSend{Devices: names, SendRequest: SendRequest{Body: "b", TTL: 3600}}
	seqNo := int64(0)
	send1 := func() {
		p, err := svc.Plan(ctx, app, send)
		if err != nil {
			t.Fatal(err)
		}
		seqNo++
		if _, err := svc.Commit(ctx, p, seqNo, &store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: 1 << 50}); err != nil {
			t.Fatal(err)
		}
	}
	// The counters are the process's, so a GC emptying sync.Pools or
	// Pebble's own goroutines add to some runs (bimodal: 3962 or 4165
	// bytes a message on the same code). Nothing subtracts, so the
	// least of several runs is the batch send's own cost.
	send1()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	allocs, bytes := math.Inf(1), math.Inf(1)
	for range 8 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		send1()
		runtime.ReadMemStats(&after)
		allocs = min(allocs, float64(after.Mallocs-before.Mallocs))
		bytes = min(bytes, float64(after.TotalAlloc-before.TotalAlloc)/n)
	}
	t.Logf("a batch send of %d: %.1f objects and %.0f bytes a message (least of 8 runs)", n, allocs/n, bytes)
	if per := allocs / n; per > 7 {
		t.Errorf("a batch send of %d allocated %.1f objects a message, want at most 7", n, per)
	}
	if bytes > 4000 {
		t.Errorf("a batch send of %d allocated %.0f bytes a message, want at most 4000", n, bytes)
	}
}
