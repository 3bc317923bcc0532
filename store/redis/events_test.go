package redis

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/redis/redistest"
)

// TestWaitEventsAcrossStores: two Stores on one Redis, as two nodes are.
// Waiters on one wake for appends made through the other, and many
// waiters hold no pool connection each: they share the one subscription.
func TestWaitEventsAcrossStores(t *testing.T) {
	requireServer(t)
	ctx := context.Background()
	prefix := newPrefix()
	a, b := open(t, standalone, prefix), open(t, standalone, prefix)
	defer a.Close()
	defer b.Close()

	const waiters = 50
	// Well below waitRecheck: a waiter must be woken, not time out into
	// its periodic recheck.
	wctx, cancel := context.WithTimeout(ctx, waitRecheck*3/4)
	defer cancel()
	woke := make(chan error, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			woke <- b.WaitEvents(wctx, "app", 0)
		}()
	}
	// Let them all block (a spurious early return would only weaken the
	// test, not fail it).
	time.Sleep(200 * time.Millisecond)
	if st := b.rdb.PoolStats(); st.TotalConns-st.IdleConns > 2 {
		t.Errorf("%d waiters hold %d pool connections; want them to share the subscription", waiters, st.TotalConns-st.IdleConns)
	}
	if _, err := a.AppendEvents(ctx, []store.Event{{AppKey: "app", DeviceName: "d", Type: "device.up", Time: 1}}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for range waiters {
		if err := <-woke; err != nil {
			t.Fatalf("a waiter on the other Store: %v, want woken by the append", err)
		}
	}
	p, err := b.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 10})
	if err != nil || len(p.Events) != 1 {
		t.Fatalf("the other Store reads %+v, %v", p, err)
	}

	// An emitting write through a wholly different path wakes it too.
	if _, err := a.CreateDevices(ctx, "app", []store.Device{{Name: "dev", Emit: []store.Event{{Type: "device.created"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEvents(wctx, "app", p.Next); err != nil {
		t.Fatal(err)
	}
}

// TestEventIDs: an event id is the stream id's ms*1,000+seq, at most
// 2^53-1 (so every JSON parser holds it exactly), and ids keep rising when Redis's clock is
// behind the last id (a clock that went back) and past a seq of 999.
func TestEventIDs(t *testing.T) {
	requireServer(t)
	ctx := context.Background()
	s := openTest(t)
	for _, c := range []struct{ id int64 }{{1}, {999}, {1_000}, {1_732_000_000_123_042}} {
		back, err := eventID(streamID(c.id))
		if err != nil || back != c.id {
			t.Errorf("id %d → %q → %d, %v", c.id, streamID(c.id), back, err)
		}
	}
	for _, bad := range []string{"1-1000", "x-1", "1", "-1-0"} {
		if _, err := eventID(bad); err == nil {
			t.Errorf("eventID(%q): no error", bad)
		}
	}

	// A fresh id of today's clock: JavaScript, jq and every parser that
	// reads JSON numbers as doubles must hold it (and report_seq) exactly.
	now, err := s.AppendEvents(ctx, []store.Event{{AppKey: "app", Type: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if now[0].ID > 1<<53-1 {
		t.Errorf("event id %d is above 2^53-1", now[0].ID)
	}

	future := time.Now().Add(time.Hour).UnixMilli()
	for _, c := range []struct {
		last string
		want int64
	}{
		{fmt.Sprintf("%d-5", future), future*eventIDScale + 6},
		{fmt.Sprintf("%d-999", future), (future + 1) * eventIDScale},
	} {
		// The stream must hold nothing above the forced last id.
		must(t, s.rdb.Del(ctx, s.eventStreamKey("app")).Err())
		must(t, s.rdb.Set(ctx, s.eventLastKey("app"), c.last, 0).Err())
		out, err := s.AppendEvents(ctx, []store.Event{{AppKey: "app", Type: "t"}, {AppKey: "app", Type: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		if out[0].ID != c.want || out[1].ID != c.want+1 {
			t.Errorf("after last id %s: ids %d, %d; want %d, %d", c.last, out[0].ID, out[1].ID, c.want, c.want+1)
		}
		p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "app", After: out[0].ID, Limit: 10})
		if err != nil || len(p.Events) != 1 || p.Events[0].ID != out[1].ID {
			t.Errorf("read after %d: %+v, %v", out[0].ID, p, err)
		}
	}
}

// TestWaitEventsRestart: Redis restarts (SIGKILL) under a blocked
// waiter. Its subscription comes back by itself, and an append made
// around the restart wakes the waiter, well before its periodic recheck.
func TestWaitEventsRestart(t *testing.T) {
	requireServer(t)
	if os.Getenv("DEVMSG_TEST_REDIS") != "" {
		t.Skip("needs a redis-server it can kill; DEVMSG_TEST_REDIS names a running one")
	}
	srv, err := redistest.Start(t.TempDir(), "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	prefix := newPrefix()
	w := open(t, []string{srv.Addr}, prefix)
	defer w.Close()

	// A pull loop as the REST API runs it: wait, read, again; errors
	// while Redis is down are retried.
	deadline := time.Now().Add(waitRecheck * 3 / 4)
	got := make(chan int64, 1)
	go func() {
		for time.Now().Before(deadline) {
			wctx, cancel := context.WithDeadline(ctx, deadline)
			err := w.WaitEvents(wctx, "app", 0)
			cancel()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if p, err := w.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 10}); err == nil && len(p.Events) > 0 {
				got <- p.Events[0].ID
				return
			}
		}
		got <- 0
	}()
	time.Sleep(100 * time.Millisecond) // the waiter subscribes and blocks
	must(t, srv.Restart())
	a := open(t, []string{srv.Addr}, prefix)
	defer a.Close()
	out, err := a.AppendEvents(ctx, []store.Event{{AppKey: "app", Type: "device.up"}})
	must(t, err)
	if id := <-got; id != out[0].ID {
		t.Fatalf("the waiter read event %d, want %d: it missed an append made around a restart", id, out[0].ID)
	}
}

// TestCloseWakesWaiters: a WaitEvents blocked when the Store closes
// returns, rather than wait out its context.
func TestCloseWakesWaiters(t *testing.T) {
	requireServer(t)
	s := open(t, standalone, newPrefix())
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(context.Background(), "a", 0) }()
	time.Sleep(100 * time.Millisecond)
	must(t, s.Close())
	select {
	case <-done:
	case <-time.After(waitRecheck * 3 / 4):
		t.Fatal("a waiter still waits after Close")
	}
}
