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
	t.Run("EventsSurviveCrash", func(t *testing.T) {
		for round := range rounds {
			if !t.Run(fmt.Sprint("round ", round), func(t *testing.T) { testEventsCrash(t, open(t)) }) {
				return
			}
		}
	})
	t.Run("BatchSurvivesCrash", func(t *testing.T) { testBatchCrash(t, open(t)) })
	t.Run("BroadcastStepSurvivesCrash", func(t *testing.T) {
		for round := range rounds {
			if !t.Run(fmt.Sprint("round ", round), func(t *testing.T) { testStepCrash(t, open(t)) }) {
				return
			}
		}
	})
	t.Run("SurvivesCrash", func(t *testing.T) {
		for round := range rounds {
			if !t.Run(fmt.Sprint("round ", round), func(t *testing.T) { testBarrierCrash(t, open(t), false) }) {
				return
			}
		}
	})
	// GetSeq is a durable read (store.Store): what it returned survives
	// a crash with no Barrier after it.
	t.Run("DurableSeqSurvivesCrash", func(t *testing.T) {
		for round := range rounds {
			if !t.Run(fmt.Sprint("round ", round), func(t *testing.T) { testBarrierCrash(t, open(t), true) }) {
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

// testBarrierCrash crashes c while writers store messages and readers
// promise what they read. With seqs, each message is stored with a seq_no
// entry under its id, and readers promise the entries GetSeq returns,
// calling no Barrier: a durable read must keep them too.
func testBarrierCrash(t *testing.T, c Crashable, seqs bool) {
	ctx := context.Background()
	s := c.Store
	must(t, s.CreateApp(ctx, store.App{Key: "k1", Name: "one"}))
	devs := make([]string, barrierWriters)
	for i := range devs {
		devs[i] = fmt.Sprint("dev-", i)
	}
	mustDevices(t, s, "k1", devs...)

	r := &barrierRound{s: s, seqs: seqs, stop: make(chan struct{}), failed: make(chan error, barrierWriters+barrierReaders)}
	for w := range barrierWriters {
		r.wg.Add(1)
		go r.write(devs[w])
	}
	for range barrierReaders {
		r.wg.Add(1)
		go r.read()
	}
	r.waitForPromises(t)
	// Every id promised so far had its Barrier return before the crash.
	r.mu.Lock()
	cut := append([]int64(nil), r.promised...)
	r.mu.Unlock()
	r.crashed.Store(true)
	after := c.Crash(t)
	close(r.stop)
	r.wg.Wait()

	var lost []int64
	for _, id := range cut {
		if err := r.get(ctx, after, id); errors.Is(err, store.ErrNotFound) {
			lost = append(lost, id)
		} else if err != nil {
			t.Fatalf("get message %d after the crash: %v", id, err)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages read before a Barrier that returned are gone after a crash (up to id %d written): %v",
			len(lost), len(cut), r.next.Load(), lost[:min(len(lost), 20)])
	}
	t.Logf("%d messages read and promised before the crash, all kept (%d ids written)", len(cut), r.next.Load())
}

// barrierRound is one round of testBarrierCrash: its writers and readers
// of store s, and the ids the readers were promised.
type barrierRound struct {
	s store.Store
	// seqs says messages are stored with a seq_no entry under their id,
	// read back with GetSeq and no Barrier.
	seqs     bool
	next     atomic.Int64 // the last id handed to a writer
	crashed  atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	promised []int64
	failed   chan error
}

// fail reports a writer's or reader's error, unless the store crashed
// (then errors are expected) or one was already reported.
func (r *barrierRound) fail(err error) {
	if !r.crashed.Load() {
		select {
		case r.failed <- err:
		default:
		}
	}
}

// stopped tells whether the round is over.
func (r *barrierRound) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// write stores messages to device dev without pause until the round stops.
func (r *barrierRound) write(dev string) {
	defer r.wg.Done()
	for !r.stopped() {
		// Not pending, so no queue fills up however long it runs.
		m := msg(r.next.Add(1), "k1", dev, store.StateDelivered)
		var seqNo int64
		var seq *store.SeqEntry
		if r.seqs {
			seqNo, seq = m.ID, &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte("{}"), ExpiresAt: future()}
		}
		if err := r.s.CreateMessage(context.Background(), m, seqNo, seq); err != nil {
			r.fail(fmt.Errorf("create message %d: %w", m.ID, err))
			return
		}
	}
}

// read looks up the newest ids, calls Barrier and only then adds the ones
// it found to the promised, until the round stops.
func (r *barrierRound) read() {
	defer r.wg.Done()
	ctx := context.Background()
	for !r.stopped() {
		var seen []int64
		last := r.next.Load()
		for id := last; id > last-2*barrierWriters && id > 0; id-- {
			err := r.get(ctx, r.s, id)
			if err == nil {
				seen = append(seen, id)
			} else if !errors.Is(err, store.ErrNotFound) {
				r.fail(fmt.Errorf("get message %d: %w", id, err))
				return
			}
		}
		// GetSeq is a durable read: with seqs, no Barrier.
		if !r.seqs {
			if err := r.s.Barrier(ctx); err != nil {
				r.fail(fmt.Errorf("barrier: %w", err))
				return
			}
		}
		r.mu.Lock()
		r.promised = append(r.promised, seen...)
		r.mu.Unlock()
	}
}

// get reads id from s: its message, or with seqs its seq_no entry.
func (r *barrierRound) get(ctx context.Context, s store.Store, id int64) error {
	if r.seqs {
		_, err := s.GetSeq(ctx, "k1", id)
		return err
	}
	_, err := s.GetMessage(ctx, "k1", id)
	return err
}

// waitForPromises waits until the readers were promised barrierPromises
// ids; it fails the test, after stopping the round, on a writer's or
// reader's error or when 20 s pass first.
func (r *barrierRound) waitForPromises(t *testing.T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.promised)
		r.mu.Unlock()
		if n >= barrierPromises {
			return
		}
		select {
		case err := <-r.failed:
			close(r.stop)
			r.wg.Wait()
			t.Fatal(err)
		case <-deadline:
			close(r.stop)
			r.wg.Wait()
			t.Fatalf("only %d messages read in 20 s", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
