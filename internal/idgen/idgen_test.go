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
	if _, err := New(1024); err == nil {
		t.Fatal("node 1024 accepted")
	}
	g, _ := New(1023)
	id := g.Next()
	if id>>seqBits&maxNode != 1023 {
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
