package idgen

import (
	"sync"
	"testing"
	"time"
)

func TestNextUniqueAndIncreasing(t *testing.T) {
	g, err := New(5)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := make(map[int64]bool)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := 0; i < 20000; i++ {
				id := g.Next()
				if id <= last {
					t.Errorf("id %d not greater than previous %d", id, last)
					return
				}
				last = id
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestClockStepBack(t *testing.T) {
	g, _ := New(1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	a := g.Next()
	now = now.Add(-time.Hour)
	b := g.Next()
	if b <= a {
		t.Fatalf("after clock step back got %d, want > %d", b, a)
	}
}

func TestNodeAndTime(t *testing.T) {
	if _, err := New(MaxNode + 1); err == nil {
		t.Fatalf("node %d accepted", MaxNode+1)
	}
	g, _ := New(MaxNode)
	id := g.Next()
	if id>>seqBits&MaxNode != MaxNode {
		t.Fatalf("node bits of %d wrong", id)
	}
	if d := time.Since(Time(id)); d < 0 || d > time.Second {
		t.Fatalf("Time(id) off by %v", d)
	}
}

func TestSkip(t *testing.T) {
	g, _ := New(1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	high := g.Next()
	now = now.Add(time.Hour)
	higher := g.Next()
	// A new generator (a restart) whose clock is an hour behind.
	g2, _ := New(1)
	g2.now = func() time.Time { return now.Add(-time.Hour) }
	g2.Skip(higher)
	g2.Skip(high) // a lower id changes nothing
	if id := g2.Next(); id <= higher {
		t.Fatalf("after Skip(%d) got %d", higher, id)
	}
}

// TestIDsFitFloat64: ids of two nodes under a burst are at most 2^53 − 1
// (so JSON parsers that read numbers as doubles keep them exact),
// increasing per node, and unique across the nodes, also at the end of the
// layout's time range.
func TestIDsFitFloat64(t *testing.T) {
	if MaxID != 1<<53-1 {
		t.Fatalf("MaxID = %d, want 2^53-1", MaxID)
	}
	for _, at := range []time.Time{
		time.Now(),
		time.UnixMilli(epoch + 1<<timeBits - 10), // the last milliseconds of 2094
	} {
		t.Run(at.Format("2006"), func(t *testing.T) {
			seen := map[int64]int{}
			for _, node := range []int{0, MaxNode} {
				g, _ := New(node)
				g.now = func() time.Time { return at } // a burst: every id in one millisecond
				last := int64(0)
				for range 200 {
					id := g.Next()
					if id <= 0 || id > MaxID {
						t.Fatalf("node %d: id %d outside 1..2^53-1", node, id)
					}
					if int64(float64(id)) != id {
						t.Fatalf("node %d: id %d does not survive a float64", node, id)
					}
					if id <= last {
						t.Fatalf("node %d: id %d not above %d", node, id, last)
					}
					last = id
					if other, ok := seen[id]; ok {
						t.Fatalf("id %d given by nodes %d and %d", id, other, node)
					}
					seen[id] = node
				}
			}
		})
	}
}

// TestSkipLegacyID: an id of the old 63-bit layout, read back from an old
// data_dir, does not push new ids above 2^53 − 1.
func TestSkipLegacyID(t *testing.T) {
	g, _ := New(3)
	legacy := int64(250377693764255744) // a msgid of the 41+10+12 layout
	g.Skip(legacy)
	if id := g.Next(); id > MaxID {
		t.Fatalf("after Skip(%d) got %d > 2^53-1", legacy, id)
	}
}
