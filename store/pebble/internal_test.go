package pebble

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/storetest"
)

// clock is a settable time for the sweeper tests.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time           { return time.UnixMilli(c.ms.Load()) }
func (c *clock) add(d time.Duration)      { c.ms.Add(d.Milliseconds()) }
func newClock(t time.Time) *clock         { c := &clock{}; c.ms.Store(t.UnixMilli()); return c }
func (c *clock) at(d time.Duration) int64 { return c.ms.Load() + d.Milliseconds() }

func openTest(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openTestApp opens a store holding app "app" with the named devices, and
// returns it with a must that fails the test on an error.
func openTestApp(t *testing.T, devices ...string) (*Store, func(error)) {
	t.Helper()
	s := openTest(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	devs := make([]store.Device, len(devices))
	for i, name := range devices {
		devs[i] = store.Device{Name: name, Secret: "s"}
	}
	_, err := s.CreateDevices(ctx, "app", devs)
	must(err)
	return s, must
}

func countKeys(t *testing.T, s *Store, prefix string) int {
	t.Helper()
	n := 0
	if err := s.scan([]byte(prefix), prefixEnd([]byte(prefix)), func(_, _ []byte) (bool, error) { n++; return true, nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	c := newClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openTest(t, withClock(c.now), WithSweepInterval(0))

	// More expired entries than one sweep chunk, negative seq_nos among them.
	const expired = 3*sweepChunk + 5
	for i := range expired {
		must(t, s.PutSeq(ctx, "app", int64(i-expired/2), store.SeqEntry{ExpiresAt: c.at(time.Second)}))
	}
	must(t, s.PutSeq(ctx, "app", 1000, store.SeqEntry{Fingerprint: "live", ExpiresAt: c.at(time.Hour)}))
	// Replaced after expiry: the stale index key goes, the entry stays.
	must(t, s.PutSeq(ctx, "app", 2000, store.SeqEntry{ExpiresAt: c.at(-time.Second)}))
	must(t, s.PutSeq(ctx, "app", 2000, store.SeqEntry{Fingerprint: "replaced", ExpiresAt: c.at(time.Hour)}))
	// Expiry before 1970 is filed first and swept too.
	must(t, s.PutSeq(ctx, "app", 3000, store.SeqEntry{ExpiresAt: -5}))

	n, err := s.sweepOnce()
	must(t, err)
	if n != 2 { // 2000's stale key and 3000
		t.Fatalf("swept %d keys before the expiry, want 2", n)
	}
	c.add(2 * time.Second)
	n, err = s.sweepOnce()
	must(t, err)
	if n != expired {
		t.Fatalf("swept %d keys, want %d", n, expired)
	}
	if got := countKeys(t, s, pSeq); got != 2 {
		t.Errorf("%d entries left, want the 2 live ones", got)
	}
	if got := countKeys(t, s, pSeqExp); got != 2 {
		t.Errorf("%d index keys left, want 2", got)
	}
	for seq, fp := range map[int64]string{1000: "live", 2000: "replaced"} {
		if e, err := s.GetSeq(ctx, "app", seq); err != nil || e.Fingerprint != fp {
			t.Errorf("seq_no %d: %+v %v", seq, e, err)
		}
	}
	if n, err := s.sweepOnce(); n != 0 || err != nil {
		t.Errorf("second sweep: %d %v", n, err)
	}
}

// TestSweepRace replaces expired entries while the sweeper runs: no fresh
// entry may be deleted because its expired predecessor was due.
func TestSweepRace(t *testing.T) {
	ctx := context.Background()
	c := newClock(time.Now())
	s := openTest(t, withClock(c.now), WithSweepInterval(0))
	const n = 400
	for i := range n {
		must(t, s.PutSeq(ctx, "app", int64(i), store.SeqEntry{ExpiresAt: c.at(-time.Second)}))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.sweepOnce(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var writers sync.WaitGroup
	for w := range 8 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := w; i < n; i += 8 {
				if err := s.PutSeq(ctx, "app", int64(i), store.SeqEntry{Fingerprint: "fresh", ExpiresAt: c.at(time.Hour)}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	if _, err := s.sweepOnce(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if e, err := s.GetSeq(ctx, "app", int64(i)); err != nil || e.Fingerprint != "fresh" {
			t.Fatalf("seq_no %d after sweeps: %+v %v", i, e, err)
		}
	}
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), WithSweepInterval(time.Millisecond))
	must(t, err)
	errs, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev"}})
	must(t, err)
	must(t, errs[0])

	// Writers racing Close see success or ErrClosed, never a panic.
	var wg sync.WaitGroup
	var ok atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				err := s.PutSeq(ctx, "app", int64(g*1_000_000+i), store.SeqEntry{ExpiresAt: time.Now().Add(time.Hour).UnixMilli()})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	must(t, s.Close())
	wg.Wait()
	must(t, s.Close())

	calls := []struct {
		name string
		err  error
	}{
		{"Ping", s.Ping(ctx)},
		{"PutMeta", s.PutMeta(ctx, "k", nil)},
		{"CreateApp", s.CreateApp(ctx, store.App{Key: "a"})},
		{"CreateMessage", s.CreateMessage(ctx, store.Message{AppKey: "app", DeviceName: "dev", State: store.StatePending}, 0, nil)},
	}
	_, err = s.GetDevice(ctx, "app", "dev")
	calls = append(calls, struct {
		name string
		err  error
	}{"GetDevice", err})
	for _, c := range calls {
		if !errors.Is(c.err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", c.name, c.err)
		}
	}
	t.Logf("%d writes before Close", ok.Load())
}

func TestArguments(t *testing.T) {
	s := openTest(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.PutMeta(canceled, "k", []byte("v")); !errors.Is(err, context.Canceled) {
		t.Errorf("PutMeta with a canceled context: %v", err)
	}
	if _, err := s.GetMeta(context.Background(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a canceled PutMeta wrote: %v", err)
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.ListDevices(context.Background(), "app", "", "", limit); err == nil {
			t.Errorf("ListDevices limit %d: no error", limit)
		}
		if p, err := s.PendingMessages(context.Background(), "app", "dev", limit); err != nil || len(p) != 0 {
			t.Errorf("PendingMessages limit %d: %v %v", limit, p, err)
		}
	}
}

func TestKeysDoNotCollide(t *testing.T) {
	tests := []struct{ a, b []byte }{
		{key(pDevice, "ab", "c"), key(pDevice, "a", "bc")},
		{seqKey("a", 1), seqKey("a", -1)},
		{queueKey("a", "b", 1), queueKey("a", "b\x00", 1)},
	}
	for i, tc := range tests {
		if string(tc.a) == string(tc.b) {
			t.Errorf("case %d: both %q", i, tc.a)
		}
	}
	for _, seq := range []int64{0, -1, 1 << 62, -1 << 63} {
		app, got, ok := parseSeqExpKey(seqExpKey(42, "app", seq))
		if !ok || app != "app" || got != seq {
			t.Errorf("seq %d: parsed %q %d %v", seq, app, got, ok)
		}
	}
}

func TestStripesSpread(t *testing.T) {
	used := map[int]bool{}
	for i := range 4 * stripes {
		used[deviceStripe("app", fmt.Sprint("dev-", i))] = true
		used[seqStripe("app", int64(i))] = true
	}
	if len(used) < stripes*9/10 {
		t.Errorf("%d of %d stripes used", len(used), stripes)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBarrier runs the Barrier suite on a file system that can crash:
// a crash keeps exactly what Pebble synced, as a power loss would, and
// unlike a kill it also loses what reached the OS but not the disk.
func TestBarrier(t *testing.T) {
	storetest.RunBarrierTests(t, 10, func(t *testing.T) storetest.Crashable {
		fs := vfs.NewCrashableMem()
		s := openFS(t, fs)
		return storetest.Crashable{Store: s, Crash: func(t *testing.T) store.Store {
			return openFS(t, fs.CrashClone(vfs.CrashCloneCfg{}))
		}}
	})
}

func openFS(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("db", withFS(fs), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCloseWakesWaiters: a WaitEvents blocked when the store closes
// returns ErrClosed, rather than wait out its context.
func TestCloseWakesWaiters(t *testing.T) {
	s, err := Open(t.TempDir())
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(context.Background(), "a", 0) }()
	time.Sleep(20 * time.Millisecond)
	must(t, s.Close())
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("WaitEvents across Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter still waits after Close")
	}
}
