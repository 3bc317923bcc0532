package callback

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// countingStore counts the outbox reads that start from the beginning.
type countingStore struct {
	store.Store
	fromStart atomic.Int64
}

func (c *countingStore) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if after == 0 {
		c.fromStart.Add(1)
	}
	return c.Store.ReadOutbox(ctx, after, limit)
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
		st, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
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
