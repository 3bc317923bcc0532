package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// Crashable is a store under test together with a way to crash it.
type Crashable struct {
	Store store.Store
	// Crash simulates a crash of the store while writes are in flight
	// and returns a store opened on what survived it: exactly what was
	// durable at the moment of the call. The suite closes neither store.
	Crash func(t *testing.T) store.Store
}

// RunBarrierTests checks store.Store.Barrier: what a reader saw before a
// Barrier that returned survives a crash, even while other writes are in
// flight. Writers store messages without pause; readers look up the
// newest ids, call Barrier and only then count what they found as
// promised. A crash at a random moment must keep every promised message.
// A store that shows writes before they are durable and whose Barrier
// does not wait for them loses some.
// rounds is how many crashes to try: a crash loses a message only when it
// lands between a write's publication and its sync, so one round may miss
// that window even without a barrier, and several rarely all do.
func RunBarrierTests(t *testing.T, rounds int, open func(t *testing.T) Crashable) {
	t.Run("Idle", func(t *testing.T) {
		c := open(t)
		must(t, c.Store.Barrier(context.Background()))
		must(t, c.Store.CreateApp(context.Background(), store.App{Key: "k1", Name: "one"}))
		must(t, c.Store.Barrier(context.Background()))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Store.Barrier(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Barrier with a cancelled context: %v, want nil or context.Canceled", err)
		}
	})
	t.Run("SurvivesCrash", func(t *testing.T) {
		for round := range rounds {
			if !t.Run(fmt.Sprint("round ", round), func(t *testing.T) { testBarrierCrash(t, open(t)) }) {
				return
			}
		}
	})
}

const (
	barrierWriters = 16
	barrierReaders = 4
	// barrierPromises is how many read-then-barrier messages a round
	// collects before it crashes the store.
	barrierPromises = 300
)

func testBarrierCrash(t *testing.T, c Crashable) {
	ctx := context.Background()
	s := c.Store
	must(t, s.CreateApp(ctx, store.App{Key: "k1", Name: "one"}))
	devs := make([]string, barrierWriters)
	for i := range devs {
		devs[i] = fmt.Sprint("dev-", i)
	}
	mustDevices(t, s, "k1", devs...)

	var (
		next     atomic.Int64 // the last id handed to a writer
		crashed  atomic.Bool
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		promised []int64
		failed   = make(chan error, barrierWriters+barrierReaders)
	)
	fail := func(err error) {
		if !crashed.Load() {
			select {
			case failed <- err:
			default:
			}
		}
	}
	for w := range barrierWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Not pending, so no queue fills up however long it runs.
				m := msg(next.Add(1), "k1", devs[w], store.StateDelivered)
				if err := s.CreateMessage(ctx, m, 0, nil); err != nil {
					fail(fmt.Errorf("create message %d: %w", m.ID, err))
					return
				}
			}
		}()
	}
	for range barrierReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var seen []int64
				last := next.Load()
				for id := last; id > last-2*barrierWriters && id > 0; id-- {
					_, err := s.GetMessage(ctx, "k1", id)
					if err == nil {
						seen = append(seen, id)
					} else if !errors.Is(err, store.ErrNotFound) {
						fail(fmt.Errorf("get message %d: %w", id, err))
						return
					}
				}
				if err := s.Barrier(ctx); err != nil {
					fail(fmt.Errorf("barrier: %w", err))
					return
				}
				mu.Lock()
				promised = append(promised, seen...)
				mu.Unlock()
			}
		}()
	}
	deadline := time.After(20 * time.Second)
	for {
		mu.Lock()
		n := len(promised)
		mu.Unlock()
		if n >= barrierPromises {
			break
		}
		select {
		case err := <-failed:
			close(stop)
			wg.Wait()
			t.Fatal(err)
		case <-deadline:
			close(stop)
			wg.Wait()
			t.Fatalf("only %d messages read in 20 s", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Every id promised so far had its Barrier return before the crash.
	mu.Lock()
	cut := append([]int64(nil), promised...)
	mu.Unlock()
	crashed.Store(true)
	after := c.Crash(t)
	close(stop)
	wg.Wait()

	var lost []int64
	for _, id := range cut {
		if _, err := after.GetMessage(ctx, "k1", id); errors.Is(err, store.ErrNotFound) {
			lost = append(lost, id)
		} else if err != nil {
			t.Fatalf("get message %d after the crash: %v", id, err)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages read before a Barrier that returned are gone after a crash (up to id %d written): %v",
			len(lost), len(cut), next.Load(), lost[:min(len(lost), 20)])
	}
	t.Logf("%d messages read and promised before the crash, all kept (%d ids written)", len(cut), next.Load())
}
