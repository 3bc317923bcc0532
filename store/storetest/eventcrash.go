package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// eventCrashPromises is how many events a round of testEventsCrash
// collects (returned by AppendEvents or read) before it crashes the store.
const eventCrashPromises = 400

// testEventsCrash: appenders append without pause while a reader follows
// the log. At a random moment the store crashes. Every event that
// AppendEvents returned, and every event the reader saw, must be in the
// log after the crash, unchanged; and a new append gets an id above them
// all, so none is handed out twice.
func testEventsCrash(t *testing.T, c Crashable) {
	ctx := context.Background()
	s := c.Store
	const appenders = 16
	var (
		mu       sync.Mutex
		promised = map[int64]store.Event{}
		crashed  atomic.Bool
		stop     = make(chan struct{})
		failed   = make(chan error, appenders+1)
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		if !crashed.Load() {
			select {
			case failed <- err:
			default:
			}
		}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	promise := func(evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			promised[e.ID] = e
		}
	}
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stopped(); i++ {
				evs := []store.Event{ev("k1", fmt.Sprint("dev-", w), "device.up", int64(i), fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))}
				out, err := s.AppendEvents(ctx, evs)
				if err != nil {
					fail(fmt.Errorf("append events: %w", err))
					return
				}
				if !crashed.Load() {
					promise(out)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		after := int64(0)
		for !stopped() {
			p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "k1", After: after, Limit: 100})
			if err != nil {
				fail(fmt.Errorf("read events: %w", err))
				return
			}
			if !crashed.Load() {
				promise(p.Events)
			}
			after = p.Next
		}
	}()

	deadline := time.After(20 * time.Second)
	for wait := true; wait; {
		mu.Lock()
		n := len(promised)
		mu.Unlock()
		select {
		case err := <-failed:
			close(stop)
			wg.Wait()
			t.Fatal(err)
		case <-deadline:
			close(stop)
			wg.Wait()
			t.Fatalf("only %d events appended in 20 s", n)
		case <-time.After(2 * time.Millisecond):
			wait = n < eventCrashPromises
		}
	}
	// Every event promised so far was returned or read before the crash.
	crashed.Store(true)
	mu.Lock()
	cut := make(map[int64]store.Event, len(promised))
	for id, e := range promised {
		cut[id] = e
	}
	mu.Unlock()
	after := c.Crash(t)
	close(stop)
	wg.Wait()

	kept := map[int64]store.Event{}
	for _, e := range readAll(t, after, store.EventQuery{AppKey: "k1", Limit: 1000}) {
		kept[e.ID] = e
	}
	var lost []int64
	for id, e := range cut {
		got, ok := kept[id]
		if !ok {
			lost = append(lost, id)
			continue
		}
		if err := sameEvent(got, e); err != nil {
			t.Errorf("after the crash: %v", err)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Fatalf("%d of %d events returned or read before a crash are gone after it: %v", len(lost), len(cut), lost[:min(len(lost), 20)])
	}
	top := slices.Max(slices.Collect(func(yield func(int64) bool) {
		for id := range cut {
			if !yield(id) {
				return
			}
		}
	}))
	out, err := after.AppendEvents(ctx, []store.Event{ev("k1", "d", "device.up", 1, `{}`)})
	must(t, err)
	if out[0].ID <= top {
		t.Errorf("an append after the crash got id %d, not above %d, an id handed out before it", out[0].ID, top)
	}
	t.Logf("%d events returned or read before the crash, all kept (%d after it)", len(cut), len(kept))
}
