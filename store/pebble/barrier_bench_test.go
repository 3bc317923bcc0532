package pebble

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkBarrierUnderLoad times Barrier on a real disk while 16 writers
// commit back to back, as the dispatcher calls it between REST sends
// (an alternative Barrier was measured with it; BENCHMARKS.md).
func BenchmarkBarrierUnderLoad(b *testing.B) {
	s, err := Open(b.TempDir(), WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := []byte(pMeta + "bench-" + strconv.Itoa(w) + "-" + strconv.Itoa(i%100))
				if err := s.write(func(b *pebble.Batch) error { return b.Set(k, []byte("v"), nil) }); err != nil {
					panic(err)
				}
			}
		}()
	}
	waits := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := s.Barrier(context.Background()); err != nil {
			b.Fatal(err)
		}
		waits = append(waits, time.Since(t0))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-µs")
}
