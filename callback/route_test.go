package callback

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// countingStore counts the outbox reads that start from the beginning,
// and those that start below the highest Seq read so far; until released,
// it hides the entry with Seq hide, as if its write were not visible yet.
type countingStore struct {
	store.Store
	fromStart, back atomic.Int64
	hide            atomic.Int64
	mu              sync.Mutex
	high            int64
}

func (c *countingStore) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if after == 0 {
		c.fromStart.Add(1)
	}
	out, err := c.Store.ReadOutbox(ctx, after, limit)
	out = slices.DeleteFunc(out, func(h store.OutboxHead) bool { return h.Seq == c.hide.Load() })
	c.mu.Lock()
	defer c.mu.Unlock()
	if after < c.high {
		c.back.Add(1)
	}
	for _, h := range out {
		c.high = max(c.high, h.Seq)
	}
	return out, err
}

// TestRouterReadsOnAfterEmptyRescan: once records were routed, a rescan
// from 0 that finds no straggler must not leave the router reading the
// whole outbox (deleted entries included) from 0 on every poll.
func TestRouterReadsOnAfterEmptyRescan(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: memory.New()}
	if err := st.CreateApp(ctx, store.App{Key: "app", Name: "app", MasterSecret: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		m := store.Message{ID: id, AppKey: "app", DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
			State: store.StateDelivered, Records: []store.Record{{Type: store.RecordTargetValid, ChannelKey: "app", MsgID: fmt.Sprint(id), SentTime: 1}}}
		if err := st.CreateMessage(ctx, m, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(Config{BatchSize: 10, FlushInterval: time.Second, RetryInterval: time.Second, RequestTimeout: time.Second},
		st, appcache.New(st, time.Now), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Routed within a poll; then at least one rescan (every second).
	time.Sleep(2500 * time.Millisecond)
	before := st.fromStart.Load()
	time.Sleep(time.Second)
	// At most the one rescan of this second; at 10 ms polls the bug
	// read from 0 about 100 times.
	if n := st.fromStart.Load() - before; n > 3 {
		t.Errorf("the router read the outbox from 0 %d times in a second after routing everything; want at most the rescans", n)
	}
}

// TestRouterRescansFromGap: an entry that becomes visible after entries
// with higher Seqs is routed at the next rescan, which starts below it;
// once no Seq is missing, rescans do not go back at all (in Pebble, going
// back walks the tombstones of the routed entries).
func TestRouterRescansFromGap(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	st := &countingStore{Store: mem}
	if err := st.CreateApp(ctx, store.App{Key: "app", Name: "app", MasterSecret: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		m := store.Message{ID: id, AppKey: "app", DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
			State: store.StateDelivered, Records: []store.Record{{Type: store.RecordTargetValid, SentTime: 1}}}
		if err := st.CreateMessage(ctx, m, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, err := mem.ReadOutbox(ctx, 0, 10)
	if err != nil || len(all) != 3 {
		t.Fatalf("outbox %+v %v", all, err)
	}
	st.hide.Store(all[1].Seq)
	w, err := New(Config{BatchSize: 10, FlushInterval: time.Second, RetryInterval: time.Second, RequestTimeout: time.Second},
		st, appcache.New(st, time.Now), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	left := func() []store.OutboxHead {
		out, err := mem.ReadOutbox(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The switch is off: what the router reads, it drops.
	deadline := time.Now().Add(5 * time.Second)
	for len(left()) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := left(); len(got) != 1 || got[0].Seq != all[1].Seq {
		t.Fatalf("outbox with the middle entry hidden: %+v", got)
	}
	st.hide.Store(0)
	// The next rescan, within a second, reads from below the gap; the
	// next full rescan would be 10 s away.
	deadline = time.Now().Add(2500 * time.Millisecond)
	for len(left()) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := left(); len(got) != 0 {
		t.Fatalf("straggler not routed by a rescan: %+v", got)
	}
	back := st.back.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := st.back.Load() - back; n != 0 {
		t.Errorf("with no Seq missing, the router read from below the highest Seq %d times in 1.5 s; want 0", n)
	}
}
