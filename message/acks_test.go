package message

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// readCountStore counts the messages the dispatcher reads from the store.
type readCountStore struct {
	store.Store
	read atomic.Int64
}

func (s *readCountStore) PendingMessages(ctx context.Context, app, dev string, limit int) ([]store.Message, error) {
	msgs, err := s.Store.PendingMessages(ctx, app, dev, limit)
	s.read.Add(int64(len(msgs)))
	return msgs, err
}

func (s *readCountStore) GetMessage(ctx context.Context, app string, id int64) (store.Message, error) {
	s.read.Add(1)
	return s.Store.GetMessage(ctx, app, id)
}

// TestDispatcherReadsOnlyMessagesItSends checks that a device with
// messages in flight is not read its whole window again at every send: a
// flush reads the queue's msgids, and a message that its send announced
// with Notify is not read back at all.
func TestDispatcherReadsOnlyMessagesItSends(t *testing.T) {
	f := newFixture(t)
	counted := &readCountStore{Store: f.st}
	f.d.store = counted
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	var sent []int64
	for i := range 10 {
		sent = append(sent, f.send(t, 60))
		eventually(t, "the message sent", func() bool { return len(c.received()) == i+1 })
	}
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v", got, sent)
	}
	if n := counted.read.Load(); n != 0 {
		t.Fatalf("%d messages read back for 10 notified sends with up to 9 in flight, want 0", n)
	}
	// A message queued without a Notify is read, alone.
	quiet := store.Message{ID: f.svc.ids.Next(), AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
		TimeCreate: f.clock.Unix(), ExpireTime: f.clock.Unix() + 60, State: store.StatePending}
	must(t, f.st.CreateMessage(context.Background(), quiet, 0, nil))
	f.d.Wake("app", "dev-1")
	eventually(t, "the quiet message sent", func() bool { return len(c.received()) == 11 })
	if n := counted.read.Load(); n != 1 {
		t.Fatalf("%d messages read for one unannounced message, want 1", n)
	}
}

// gatedStore holds the first UpdateMessages until open is closed, and
// records how many updates each call carried.
type gatedStore struct {
	store.Store
	open  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	sizes []int
}

func (s *gatedStore) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(updates))
	s.mu.Unlock()
	s.once.Do(func() { <-s.open })
	return s.Store.UpdateMessages(ctx, updates)
}

func (s *gatedStore) UpdateMessage(context.Context, string, int64, func(*store.Message) error) (store.Message, error) {
	panic("a PUBACK stored on its own")
}

// TestDispatcherStoresAcksTogether checks that PUBACKs are stored many
// to a write, off the caller (the connection's read loop): while one
// write is under way the acknowledgements that arrive wait for the next,
// which stores them all; each message gets its delivery record once and
// keeps its place in the window until its write is done.
func TestDispatcherStoresAcksTogether(t *testing.T) {
	f := newFixture(t)
	gated := &gatedStore{Store: f.st, open: make(chan struct{})}
	f.d = NewDispatcher(gated, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.d.now = func() time.Time { return f.clock }
	var sent []int64
	for range Window + 1 {
		sent = append(sent, f.send(t, 60))
	}
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "a full window", func() bool { return len(c.received()) == Window })
	pid := func(id int64) uint16 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pids[id]
	}
	writes := func() int {
		gated.mu.Lock()
		defer gated.mu.Unlock()
		return len(gated.sizes)
	}
	// The first PUBACK's write blocks; every other PUBACK returns at once.
	f.d.Acked(c, "app", "dev-1", pid(sent[0]))
	eventually(t, "the first write", func() bool { return writes() == 1 })
	for _, id := range sent[1:Window] {
		f.d.Acked(c, "app", "dev-1", pid(id))
	}
	gated.mu.Lock()
	first := slices.Clone(gated.sizes)
	gated.mu.Unlock()
	if !slices.Equal(first, []int{1}) {
		t.Fatalf("writes started before the first ended: %v, want one of 1", first)
	}
	if got := c.received(); len(got) != Window {
		t.Fatalf("%d messages sent while no delivery was stored, want the window of %d", len(got), Window)
	}
	close(gated.open)
	eventually(t, "the message beyond the window sent", func() bool { return len(c.received()) == Window+1 })
	for _, id := range sent[:Window] {
		if st, types := f.state(t, id); st != store.StateDelivered || !slices.Equal(types, []int{0, 2, 4}) {
			t.Fatalf("message %d: %s %v", id, st, types)
		}
	}
	gated.mu.Lock()
	defer gated.mu.Unlock()
	if !slices.Equal(gated.sizes, []int{1, Window - 1}) {
		t.Fatalf("writes of %v PUBACKs, want 1 then the %d that came meanwhile", gated.sizes, Window-1)
	}
}
