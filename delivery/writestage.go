package delivery

import "sync"

// writeStage gathers items (PUBACKs waiting for their delivered state)
// for store writes of many at a time: a goroutine writes while the next
// items gather, and exists only while there is something to write; when
// batch items are waiting another starts, up to writers, so that one
// write's fsync does not hold up the next. Each write takes at most max
// items. Writes under way at once hold different items, so their order
// does not matter. The zero value is not usable: its fields are set
// once, before the first add.
type writeStage[T any] struct {
	batch, max, writers int
	write               func([]T)

	mu      sync.Mutex
	queue   []T
	running int // goroutines running run
}

// add queues x and starts a writer if none runs, or if a whole batch is
// waiting and fewer than writers run.
func (s *writeStage[T]) add(x T) {
	s.mu.Lock()
	s.queue = append(s.queue, x)
	if s.running > 0 && (len(s.queue) < s.batch || s.running >= s.writers) {
		s.mu.Unlock()
		return
	}
	s.running++
	s.mu.Unlock()
	go s.run()
}

// run writes queued items until none is left.
func (s *writeStage[T]) run() {
	for {
		s.mu.Lock()
		n := min(len(s.queue), s.max)
		if n == 0 {
			s.running--
			if s.running == 0 {
				s.queue = nil
			}
			s.mu.Unlock()
			return
		}
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		s.mu.Unlock()
		s.write(batch)
	}
}
