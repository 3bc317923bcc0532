package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// race runs fn(i) on n goroutines started together and counts the
// outcomes by error (nil counted under "ok").
func race(t *testing.T, n int, fn func(i int) error, allowed ...error) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				counts["ok"]++
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					counts[a.Error()]++
					return
				}
			}
			t.Errorf("goroutine %d: %v", i, err)
		}()
	}
	close(start)
	wg.Wait()
	return counts
}

func testConcurrentSetDesired(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	counts := race(t, 50, func(i int) error {
		_, err := s.SetDesired(context.Background(), update("app", "dev-1", 1, fmt.Sprintf(`{"a":%d}`, i)), 0, nil)
		return err
	}, store.ErrVersionConflict)
	if counts["ok"] != 1 || counts[store.ErrVersionConflict.Error()] != 49 {
		t.Fatalf("outcomes %v, want 1 ok and 49 conflicts", counts)
	}
	if sh, _ := s.GetShadow(context.Background(), "app", "dev-1"); sh.LastDesiredVersion != 2 {
		t.Fatalf("shadow %+v", sh)
	}
}

func testConcurrentSetDesiredDevices(t *testing.T, s store.Store) {
	var devs []string
	for i := range 50 {
		devs = append(devs, fmt.Sprint("dev-", i))
	}
	mustDevices(t, s, "app", devs...)
	// Each device gets 4 writers in version order; all 200 must succeed.
	counts := race(t, 50, func(i int) error {
		for v := int64(1); v <= 4; v++ {
			if _, err := s.SetDesired(context.Background(), update("app", devs[i], v, `{"a":1}`), int64(i)*10+v, &store.SeqEntry{ExpiresAt: future()}); err != nil {
				return err
			}
		}
		return nil
	})
	if counts["ok"] != 50 {
		t.Fatalf("outcomes %v", counts)
	}
	for _, d := range devs {
		if sh, _ := s.GetShadow(context.Background(), "app", d); sh.LastDesiredVersion != 5 {
			t.Fatalf("%s: %+v", d, sh)
		}
	}
}

func testConcurrentPutSeq(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	ctx := context.Background()
	counts := race(t, 60, func(i int) error {
		seq := &store.SeqEntry{Fingerprint: fmt.Sprint(i), ExpiresAt: future()}
		switch i % 3 {
		case 0:
			return s.PutSeq(ctx, "app", 42, *seq)
		case 1:
			return s.CreateMessage(ctx, msg(int64(100+i), "app", "dev-1", store.StatePending), 42, seq)
		default:
			// Distinct versions never conflict with one another's version;
			// only the seq_no decides.
			_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 42, seq)
			return err
		}
	}, store.ErrSeqUsed)
	if counts["ok"] != 1 || counts[store.ErrSeqUsed.Error()] != 59 {
		t.Fatalf("outcomes %v, want 1 ok and 59 seq used", counts)
	}
	e, err := s.GetSeq(ctx, "app", 42)
	must(t, err)
	var winner int
	fmt.Sscan(e.Fingerprint, &winner)
	p, _ := s.PendingMessages(ctx, "app", "dev-1", 100)
	sh, _ := s.GetShadow(ctx, "app", "dev-1")
	switch winner % 3 {
	case 0:
		if len(p) != 0 || sh.LastDesiredVersion != 1 {
			t.Fatalf("PutSeq won but %d messages and version %d", len(p), sh.LastDesiredVersion)
		}
	case 1:
		if len(p) != 1 || p[0].ID != int64(100+winner) || sh.LastDesiredVersion != 1 {
			t.Fatalf("message %d won but queue %v and version %d", 100+winner, p, sh.LastDesiredVersion)
		}
	default:
		if len(p) != 0 || sh.LastDesiredVersion != 2 {
			t.Fatalf("SetDesired won but %d messages and version %d", len(p), sh.LastDesiredVersion)
		}
	}
}

func testConcurrentQueueLimit(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	ctx := context.Background()
	const prefill = store.MaxPending - 20
	for i := range prefill {
		must(t, s.CreateMessage(ctx, msg(int64(i), "app", "dev-1", store.StatePending), 0, nil))
	}
	counts := race(t, 50, func(i int) error {
		return s.CreateMessage(ctx, msg(int64(10000+i), "app", "dev-1", store.StatePending), 0, nil)
	}, store.ErrQueueFull)
	if counts["ok"] != 20 || counts[store.ErrQueueFull.Error()] != 30 {
		t.Fatalf("outcomes %v, want 20 ok and 30 queue full", counts)
	}
	if p, _ := s.PendingMessages(ctx, "app", "dev-1", 2*store.MaxPending); len(p) != store.MaxPending {
		t.Fatalf("%d pending", len(p))
	}
}

func testConcurrentCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	counts := race(t, 30, func(i int) error {
		// Every call also creates a name of its own, which must succeed.
		errs, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "contested", Secret: fmt.Sprint(i)}, {Name: fmt.Sprint("own-", i)}})
		if err != nil {
			return err
		}
		if errs[1] != nil {
			return fmt.Errorf("own device: %w", errs[1])
		}
		return errs[0]
	}, store.ErrAlreadyExists)
	if counts["ok"] != 1 || counts[store.ErrAlreadyExists.Error()] != 29 {
		t.Fatalf("outcomes %v, want 1 ok and 29 already exists", counts)
	}
	page, err := s.ListDevices(ctx, "app", "", "", 100)
	must(t, err)
	if len(page.Devices) != 31 {
		t.Fatalf("%d devices, want 31", len(page.Devices))
	}
}
