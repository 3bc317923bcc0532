package callback

import (
	"context"
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
		st, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
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
