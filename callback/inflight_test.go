package callback

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// inflightApp stores an app whose callbacks go to url, and a device.
func inflightApp(t *testing.T, st store.Store, url string) {
	t.Helper()
	ctx := context.Background()
	app := store.App{Key: "app", Name: "app", MasterSecret: "s",
		Callback: store.CallbackSettings{Enabled: true, URLs: []store.CallbackURL{{URL: url, Default: true}}}}
	if err := st.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
}

// addRecords stores message id with n records, all in the outbox at once.
func addRecords(t *testing.T, st store.Store, id int64, n int) {
	t.Helper()
	m := store.Message{ID: id, AppKey: "app", DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
		State: store.StateDelivered}
	for range n {
		m.Records = append(m.Records, store.Record{Type: store.RecordTargetValid, ChannelKey: "app", MsgID: fmt.Sprint(id), SentTime: 1})
	}
	if err := st.CreateMessage(context.Background(), m, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func startWorker(t *testing.T, st store.Store, maxRetries int) *Worker {
	t.Helper()
	w, err := New(Config{BatchSize: 1, FlushInterval: time.Hour, RetryInterval: 10 * time.Millisecond, MaxRetries: maxRetries,
		RequestTimeout: 30 * time.Second, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		st, appcache.New(st, time.Now), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// TestSenderPostsBacklogAtOnce: with more than a batch queued for one
// URL, the next batch is POSTed while the receiver has not yet answered
// the first. One batch at a time held a destination to BatchSize records
// per round trip (and two fsyncs): a receiver or a disk a few
// milliseconds slower than usual left records waiting seconds in a
// growing backlog.
func TestSenderPostsBacklogAtOnce(t *testing.T) {
	second := make(chan struct{})
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		n := posts
		mu.Unlock()
		switch n {
		case 1:
			// Answered once a second POST came, or after a while
			// without one.
			select {
			case <-second:
			case <-time.After(10 * time.Second):
			}
		case 2:
			close(second)
		}
	}))
	defer srv.Close()
	st := memory.New()
	inflightApp(t, st, srv.URL)
	addRecords(t, st, 1, 3) // three batches of one
	startWorker(t, st, 0)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("no second batch was POSTed while the receiver held the first")
	}
	// Every record is delivered, once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		qs, err := st.CallbackQueues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := posts
		mu.Unlock()
		if len(qs) == 0 && n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d POSTs, queues %v; want 3 POSTs and none left", n, qs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSenderNarrowsAfterFailure: after an attempt failed, the next round
// POSTs one batch, not maxInFlight: a failing receiver is not sent a
// burst of batches that will fail as well.
func TestSenderNarrowsAfterFailure(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	overlapped := false // a POST came while the first one after the failures was held
	holding := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		n := posts
		if holding {
			overlapped = true
		}
		mu.Unlock()
		switch {
		case n <= 2: // the first round: both batches fail
			http.Error(w, "down", http.StatusServiceUnavailable)
		case n == 3:
			// The first POST of the next round, held for a while: a
			// second batch of that round, if sent, comes meanwhile.
			mu.Lock()
			holding = true
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			holding = false
			mu.Unlock()
		}
	}))
	defer srv.Close()
	st := memory.New()
	inflightApp(t, st, srv.URL)
	addRecords(t, st, 1, 2)
	startWorker(t, st, 0) // no retries: a failed batch is dead-lettered at once
	deadline := time.Now().Add(10 * time.Second)
	for {
		dl, err := st.ListDeadLetters(context.Background(), "app", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dl) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letters after 10 s: %+v; want the 2 failed batches", dl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	addRecords(t, st, 2, 3)
	for {
		mu.Lock()
		n := posts
		mu.Unlock()
		if n == 5 {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("%d POSTs; want 5", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlapped {
		t.Error("after failed POSTs, the next round sent more than one batch at once")
	}
}

// TestStragglerReachesSenderBehindItsCursor: an entry that became
// visible late is routed at the router's rescan into a queue whose
// sender already read past its Seq and holds a batch waiting to fill.
// The sender is told to read its queue from the start, so the straggler
// fills that batch and goes; it used to wait for the next listing of the
// queues (every 5 s) or the flush interval.
func TestStragglerReachesSenderBehindItsCursor(t *testing.T) {
	var mu sync.Mutex
	got := map[string]bool{} // record ids received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var recs []Record
		if err := json.NewDecoder(r.Body).Decode(&recs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rec := range recs {
			got[rec.ID] = true
		}
		mu.Unlock()
	}))
	defer srv.Close()
	ctx := context.Background()
	mem := memory.New()
	st := &countingStore{Store: mem}
	inflightApp(t, st, srv.URL)
	addRecords(t, st, 1, 4) // records 1-0 .. 1-3
	all, err := mem.ReadOutbox(ctx, 0, 10)
	if err != nil || len(all) != 4 {
		t.Fatalf("outbox %+v %v", all, err)
	}
	st.hide.Store(all[0].Seq) // 1-0 is not visible yet
	w, err := New(Config{BatchSize: 2, FlushInterval: time.Hour, RetryInterval: time.Second, RequestTimeout: 10 * time.Second,
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		st, appcache.New(st, time.Now), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	waitFor := func(ids ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			all := true
			for _, id := range ids {
				all = all && got[id]
			}
			mu.Unlock()
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("records %v not all delivered; got %v", ids, got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// 1-1 and 1-2 go as a full batch; 1-3 waits for a second record.
	waitFor("1-1", "1-2")
	// Half a second later, a new record: the sender, a second past its
	// last read from the start, reads from the start again, sends 1-3
	// and 2-0, and holds 2-1 for its batch, its cursor past 1-0's Seq.
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	addRecords(t, st, 2, 2)
	waitFor("1-3", "2-0")
	// 1-0 becomes visible; the router's next rescan (at 2 s) routes it.
	st.hide.Store(0)
	waitFor("1-0", "2-1")
	// The queues are listed, and each sender told to read from the
	// start, every 5 s: the straggler must not have waited for that.
	if at := time.Since(start); at >= listEvery {
		t.Errorf("the straggler was delivered %v after the start, at the listing of the queues; want it at the router's rescan", at)
	}
}
