package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/devmsg/devmsg/store"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s := open(t, standalone, newPrefix())
	t.Cleanup(func() { s.Close() })
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func members(t *testing.T, s *Store, key string) []string {
	t.Helper()
	m, err := s.rdb.SMembers(context.Background(), key).Result()
	must(t, err)
	slices.Sort(m)
	return m
}

func failed(id int64, app string) store.Message {
	return store.Message{
		ID: id, AppKey: app, DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StateFailed,
		Records: []store.Record{{Type: store.RecordTargetInvalid, SentTime: 1}},
	}
}

// TestActivityIndex follows an app into and out of the global indexes.
func TestActivityIndex(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	must(t, s.CreateApp(ctx, store.App{Key: "app"}))
	if _, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	pending := failed(1, "app")
	pending.State = store.StatePending
	must(t, s.CreateMessage(ctx, pending, 0, nil))
	must(t, s.CreateMessage(ctx, failed(2, "app"), 0, nil))
	if got := members(t, s, s.activeKey(activeCB)); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("cb index %v", got)
	}
	if got := members(t, s, s.activeKey(activeExp)); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("exp index %v", got)
	}

	// Routed to a queue: the app stays listed while the queue holds entries.
	out, err := s.ReadOutbox(ctx, 0, 10)
	must(t, err)
	q := store.CallbackQueue{AppKey: "app", URL: "http://cb.example/"}
	routes := []store.OutboxRoute{{Entry: out[0], URL: q.URL}, {Entry: out[1]}}
	must(t, s.RouteOutbox(ctx, routes))
	if _, err := s.ReadOutbox(ctx, 0, 10); err != nil {
		t.Fatal(err)
	}
	if got := members(t, s, s.activeKey(activeCB)); len(got) != 1 {
		t.Fatalf("app with a queued entry left the cb index: %v", got)
	}
	must(t, s.DeleteCallbacks(ctx, q, []int64{out[0].Seq}))
	if qs, _ := s.CallbackQueues(ctx); len(qs) != 0 {
		t.Fatalf("queues after delivery %v", qs)
	}
	if _, err := s.ReadOutbox(ctx, 0, 10); err != nil {
		t.Fatal(err)
	}
	if got := members(t, s, s.activeKey(activeCB)); len(got) != 0 {
		t.Fatalf("idle app still in the cb index: %v", got)
	}
	if n, _ := s.rdb.Exists(ctx, s.flagKey("app", activeCB)).Result(); n != 0 {
		t.Fatal("flag left behind by a prune")
	}

	// Expiry: listed until its last pending message leaves.
	if _, err := s.ExpiredMessages(ctx, 1000, 10); err != nil {
		t.Fatal(err)
	}
	if got := members(t, s, s.activeKey(activeExp)); len(got) != 1 {
		t.Fatalf("app with a pending message left the exp index: %v", got)
	}
	_, err = s.UpdateMessage(ctx, "app", 1, func(m *store.Message) error { m.State = store.StateExpired; return nil })
	must(t, err)
	if got, _ := s.ExpiredMessages(ctx, 1000, 10); len(got) != 0 {
		t.Fatalf("expired %+v", got)
	}
	if got := members(t, s, s.activeKey(activeExp)); len(got) != 0 {
		t.Fatalf("idle app still in the exp index: %v", got)
	}

	// A new record lists the app again; so does Open after a crash that
	// lost the add.
	must(t, s.CreateMessage(ctx, failed(3, "app"), 0, nil))
	must(t, s.rdb.SRem(ctx, s.activeKey(activeCB), "app").Err())
	if got, _ := s.ReadOutbox(ctx, 0, 10); len(got) != 0 {
		t.Fatalf("unlisted app read: %+v", got)
	}
	s2 := open(t, standalone, s.prefix)
	defer s2.Close()
	if got, _ := s2.ReadOutbox(ctx, 0, 10); len(got) != 1 || got[0].ID != "3-0" {
		t.Fatalf("after Open repaired the index: %+v", got)
	}
}

// TestActivityInterleavings runs a writer's steps (global step, write
// script, add) and a pruner's (prune script, remove, unlist script) in
// the orders that matter; the app must end up listed each time.
func TestActivityInterleavings(t *testing.T) {
	requireServer(t)
	ctx := context.Background()
	type step func(s *Store, id int64) error
	var last int64
	wGlobal := func(s *Store, _ int64) (err error) { last, err = s.globalStep(ctx, "", 1, "app", false); return err }
	wWrite := func(s *Store, id int64) error { return s.writeMessage(ctx, failed(id, "app"), 0, nil, false, last) }
	var pruned bool
	pPrune := func(s *Store, _ int64) error {
		n, err := s.run(ctx, pruneScript, append([]string{s.flagKey("app", activeCB)}, s.idleKeys("app", activeCB)...)).Int64()
		pruned = n == 1
		return err
	}
	pRemove := func(s *Store, _ int64) error {
		if !pruned {
			return nil
		}
		return s.rdb.SRem(ctx, s.activeKey(activeCB), "app").Err()
	}
	pUnlist := func(s *Store, _ int64) error {
		if !pruned {
			return nil
		}
		back, err := s.run(ctx, unlistScript, []string{s.flagKey("app", activeCB)}).Int64()
		if err == nil && back == 1 {
			err = s.rdb.SAdd(ctx, s.activeKey(activeCB), "app").Err()
		}
		return err
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"prune between global step and write", []step{wGlobal, pPrune, pRemove, pUnlist, wWrite}},
		{"write between prune and remove", []step{pPrune, wGlobal, wWrite, pRemove, pUnlist}},
		{"write between remove and unlist", []step{wGlobal, pPrune, pRemove, wWrite, pUnlist}},
		{"write after prune", []step{pPrune, pRemove, pUnlist, wGlobal, wWrite}},
		{"write before prune", []step{wGlobal, wWrite, pPrune, pRemove, pUnlist}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			s.inline = false // the Cluster path, where these steps are apart
			// An idle app that is listed, with its flag set: it had a
			// record, routed nowhere.
			must(t, s.CreateMessage(ctx, failed(1, "app"), 0, nil))
			out, err := s.ReadOutbox(ctx, 0, 10) // not idle yet: no prune
			must(t, err)
			if len(out) != 1 {
				t.Fatalf("set-up outbox %+v", out)
			}
			must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: out[0]}}))
			for _, st := range tc.steps {
				must(t, st(s, 2))
			}
			if got := members(t, s, s.activeKey(activeCB)); !slices.Equal(got, []string{"app"}) {
				t.Fatalf("app holding an entry is not listed: %v", got)
			}
			if got, _ := s.ReadOutbox(ctx, 0, 10); len(got) != 1 || got[0].ID != "2-0" {
				t.Fatalf("outbox %+v", got)
			}
		})
	}
}

// TestActivityIndexRace routes records to nowhere from several readers
// while writers add them, so that prunes (which readers run whenever the
// app's outbox is empty) race with writes: every record must be read,
// and none may be left in an unlisted outbox.
func TestActivityIndexRace(t *testing.T) {
	requireServer(t)
	for _, inline := range []bool{true, false} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			s := openTest(t)
			s.inline = inline
			activityRace(t, s)
		})
	}
}

func activityRace(t *testing.T, s *Store) {
	ctx := context.Background()
	const writers, readers, perWriter = 2, 3, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if err := s.CreateMessage(ctx, failed(int64(w*perWriter+i+1), "app"), 0, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var mu sync.Mutex
	seen := map[string]bool{}
	var rg sync.WaitGroup
	for range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for finished, empty := false, 0; empty < 3; {
				select {
				case <-done:
					finished = true
				default:
				}
				out, err := s.ReadOutbox(ctx, 0, 5)
				if err != nil {
					t.Error(err)
					return
				}
				routes := make([]store.OutboxRoute, len(out))
				mu.Lock()
				for i, e := range out {
					seen[e.ID] = true
					routes[i].Entry = e
				}
				mu.Unlock()
				if err := s.RouteOutbox(ctx, routes); err != nil {
					t.Error(err)
					return
				}
				if finished && len(out) == 0 {
					empty++
				}
			}
		}()
	}
	rg.Wait()
	if len(seen) != writers*perWriter {
		n, _ := s.rdb.ZCard(ctx, s.outboxKey("app")).Result()
		t.Fatalf("read %d of %d records; %d left in the outbox", len(seen), writers*perWriter, n)
	}
}

// TestBigNumbers checks the values that do not fit a double: message ids
// and report versions near 2^63 are compared exactly.
func TestBigNumbers(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	if _, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	const big = int64(1) << 62
	for _, id := range []int64{big + 1, big, -3, 5} {
		must(t, s.CreateMessage(ctx, failed(id, "app"), 0, nil))
	}
	if id, err := s.LastMessageID(ctx); err != nil || id != big+1 {
		t.Fatalf("last message id %d %v, want %d", id, err, big+1)
	}
	// Pending ids that differ below a double's precision queue in order.
	for _, id := range []int64{big + 3, big + 2} {
		m := failed(id, "app")
		m.State = store.StatePending
		must(t, s.CreateMessage(ctx, m, 0, nil))
	}
	p, err := s.PendingMessages(ctx, "app", "dev", 10)
	must(t, err)
	if len(p) != 2 || p[0].ID != big+2 || p[1].ID != big+3 {
		t.Fatalf("pending %+v", p)
	}
	report := func(v int64) error {
		_, err := s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "dev", Version: v,
			Properties: map[string]json.RawMessage{"p": json.RawMessage(fmt.Sprint(v))}})
		return err
	}
	must(t, report(big))
	if err := report(big); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("same big version: %v", err)
	}
	must(t, report(big+1))
	if err := report(-1); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("negative version: %v", err)
	}
	must(t, report(0))
	sh, err := s.GetShadow(ctx, "app", "dev")
	must(t, err)
	if sh.LastReportedVersion != big+2 {
		t.Fatalf("version %d, want %d", sh.LastReportedVersion, big+2)
	}
}

// TestKeysApart checks that app keys cannot reach into another app's
// keys by holding the characters of the key syntax.
func TestKeysApart(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, app := range []string{"x", "x}:d:y", "x%7D:d:y", "{x}"} {
		if _, err := s.CreateDevices(ctx, app, []store.Device{{Name: "y}:d:n"}, {Name: "n"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, app := range []string{"x", "x}:d:y", "x%7D:d:y", "{x}"} {
		page, err := s.ListDevices(ctx, app, "", "", 10)
		must(t, err)
		if len(page.Devices) != 2 {
			t.Fatalf("app %q lists %+v", app, page.Devices)
		}
		for _, d := range page.Devices {
			if d.AppKey != app {
				t.Fatalf("app %q lists %+v", app, d)
			}
		}
	}
}
