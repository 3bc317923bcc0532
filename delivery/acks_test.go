package delivery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// readCountStore counts the messages the dispatcher reads from the store.
type readCountStore struct {
	store.Store
	read  atomic.Int64 // messages
	scans atomic.Int64 // queue reads
}

func (s *readCountStore) PendingIDs(ctx context.Context, app, dev string, limit int) ([]int64, error) {
	s.scans.Add(1)
	return s.Store.PendingIDs(ctx, app, dev, limit)
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
// message that its send announced with Notify is sent with no read of
// the queue or of the message; a Wake reads the queue's msgids and only
// the message it does not hold.
func TestDispatcherReadsOnlyMessagesItSends(t *testing.T) {
	f := newFixture(t)
	counted := &readCountStore{Store: f.st}
	f.d.store = counted
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	// Each send waits for the flushes before it to end: a flush under way
	// may read the next message before its send announces it.
	idle := f.idle
	eventually(t, "the first flush done", idle)
	if n := counted.scans.Load(); n != 1 {
		t.Fatalf("%d queue reads for a new connection, want 1", n)
	}
	var sent []int64
	for i := range 10 {
		sent = append(sent, f.send(t, 60))
		eventually(t, "the message sent", func() bool { return len(c.received()) == i+1 && idle() })
	}
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v", got, sent)
	}
	if n, scans := counted.read.Load(), counted.scans.Load(); n != 0 || scans != 1 {
		t.Fatalf("%d messages and %d more queue reads for 10 notified sends with up to 9 in flight, want none", n, scans-1)
	}
	// A message queued without a Notify is read, alone.
	quiet := store.Message{ID: f.ids.Next(), AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
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
	every bool // every write waits for open, not only the first
	mu    sync.Mutex
	sizes []int
}

func (s *gatedStore) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(updates))
	s.mu.Unlock()
	if s.every {
		<-s.open
	}
	s.once.Do(func() { <-s.open })
	return s.Store.UpdateMessages(ctx, updates)
}

// writes returns the sizes of the writes so far.
func (s *gatedStore) writes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sizes)
}

// ackStageFixture is a dispatcher whose PUBACK writes go through a
// gatedStore (every: each write waits for open, else the first), and a
// route to acknowledge on.
func ackStageFixture(t *testing.T, every bool) (*Dispatcher, *gatedStore, *route) {
	f := newFixture(t)
	gated := &gatedStore{Store: f.st, open: make(chan struct{}), every: every}
	d := NewDispatcher(gated, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return d, gated, &route{app: "app", dev: "dev-1"}
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
	eventually(t, "every delivery stored", func() bool { st, _ := f.state(t, sent[Window-1]); return st == store.StateDelivered })
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

// TestDispatcherKeepsOrderBehindBacklog checks that a notified message
// waits behind older pending messages that the window left unsent, and
// that the window's slots go to them in send order.
func TestDispatcherKeepsOrderBehindBacklog(t *testing.T) {
	f := newFixture(t)
	var sent []int64
	for range Window + 2 {
		sent = append(sent, f.send(t, 60))
	}
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "a full window", func() bool { return len(c.received()) == Window })
	sent = append(sent, f.send(t, 60)) // notified while the window is full
	// A slot frees (as when the ack stage forgets a message it stored)
	// before the flush the PUBACK starts: the next send's flush must not
	// give it to the new message ahead of the older ones.
	f.d.mu.Lock()
	r := f.d.routes[routeKey("app", "dev-1")]
	f.d.mu.Unlock()
	r.mu.Lock()
	delete(r.sent, sent[0])
	r.mu.Unlock()
	late := f.send(t, 60)
	eventually(t, "the freed slot used", func() bool { return len(c.received()) == Window+1 })
	if got := c.received()[Window]; got == late {
		t.Fatalf("the newest message %d took the free slot ahead of %d older ones", late, len(sent)-Window)
	}
	f.d.Acked(c, "app", "dev-1", Window+1) // the resend of sent[0]
	sent = append(sent, late)
	for _, id := range sent[1:] {
		f.ack(t, c, id)
	}
	if got, want := c.received(), slices.Insert(slices.Clone(sent), Window, sent[0]); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v: in send order, the freed message again", got, want)
	}
}

// TestDispatcherIgnoresLateNotify checks that a Notify arriving after a
// queue read already sent its message, and the device acknowledged it,
// sends nothing again: the sender may be slow to announce what it stored.
func TestDispatcherIgnoresLateNotify(t *testing.T) {
	f := newFixture(t)
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	m := store.Message{ID: f.ids.Next(), AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
		TimeCreate: f.clock.Unix(), ExpireTime: f.clock.Unix() + 60, State: store.StatePending}
	must(t, f.st.CreateMessage(context.Background(), m, 0, nil))
	f.d.Wake("app", "dev-1")
	eventually(t, "the message sent", func() bool { return len(c.received()) == 1 })
	f.d.Acked(c, "app", "dev-1", 1)
	f.d.mu.Lock()
	r := f.d.routes[routeKey("app", "dev-1")]
	f.d.mu.Unlock()
	eventually(t, "the PUBACK stored", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.sent) == 0 && r.idle()
	})
	f.d.Notify(m) // late
	eventually(t, "the flush done", r.idle)
	if got := c.received(); !slices.Equal(got, []int64{m.ID}) {
		t.Fatalf("received %v, want %d once", got, m.ID)
	}
}

// TestDispatcherSendsLateLowerIDWithoutRead checks that messages stored
// concurrently and announced out of msgid order are each sent as their
// Notify comes, with no queue read.
func TestDispatcherSendsLateLowerIDWithoutRead(t *testing.T) {
	f := newFixture(t)
	counted := &readCountStore{Store: f.st}
	f.d.store = counted
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	idle := f.idle
	eventually(t, "the first flush done", idle)
	base := f.ids.Next()
	var msgs []store.Message
	for _, id := range []int64{base, base + 1} {
		m := store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
			TimeCreate: f.clock.Unix(), ExpireTime: f.clock.Unix() + 60, State: store.StatePending}
		must(t, f.st.CreateMessage(context.Background(), m, 0, nil))
		msgs = append(msgs, m)
	}
	f.d.Notify(msgs[1])
	eventually(t, "the higher msgid sent", func() bool { return len(c.received()) == 1 && idle() })
	f.d.Notify(msgs[0])
	eventually(t, "the lower msgid sent", func() bool { return len(c.received()) == 2 && idle() })
	if got := c.received(); !slices.Equal(got, []int64{base + 1, base}) {
		t.Fatalf("received %v", got)
	}
	if n := counted.scans.Load(); n != 1 {
		t.Fatalf("%d queue reads, want only the new connection's", n)
	}
}

// TestDispatcherNewRouteReadsFirst checks that a message announced to a
// connection that has just subscribed, before the subscription's own
// flush, does not overtake the messages pending from before.
func TestDispatcherNewRouteReadsFirst(t *testing.T) {
	f := newFixture(t)
	older := f.send(t, 60)
	c := &conn{}
	f.d.route(c, "app", "dev-1") // Attach, up to its wake
	newer := f.send(t, 60)
	eventually(t, "both sent", func() bool { return len(c.received()) == 2 })
	if got := c.received(); !slices.Equal(got, []int64{older, newer}) {
		t.Fatalf("received %v, want %v", got, []int64{older, newer})
	}
}

// TestDispatcherBarrierForBroadcastMessages checks that an announced
// message of a broadcast is published only after a Barrier: a fan-out
// step returns before its fsync, and a crash could take the message back.
func TestDispatcherBarrierForBroadcastMessages(t *testing.T) {
	for _, attached := range []bool{true, false} {
		f := newFixture(t)
		log := &orderLog{}
		f.d.store = barrierStore{f.st, log}
		c := &idConn{log: log}
		if attached { // announced to a route with nothing to read: sent without a read
			f.d.Attach(c, "app", "dev-1")
			eventually(t, "the first read", func() bool {
				log.mu.Lock()
				defer log.mu.Unlock()
				return len(log.events) > 0
			})
		} else { // announced to a new route: its first flush reads the queue
			f.d.route(c, "app", "dev-1")
		}
		m := store.Message{ID: f.ids.Next(), AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
			TimeCreate: f.clock.Unix(), ExpireTime: f.clock.Unix() + 60, State: store.StatePending, Broadcast: 7}
		must(t, f.st.CreateMessage(context.Background(), m, 0, nil))
		log.mu.Lock()
		log.events = nil
		log.mu.Unlock()
		f.d.Notify(m)
		eventually(t, "the message sent", func() bool { return len(c.received()) >= 1 })
		log.mu.Lock()
		i := slices.Index(log.events, "publish "+strconv.FormatInt(m.ID, 10))
		if i < 0 || !slices.Contains(log.events[:i], "barrier") {
			t.Errorf("attached %v: events %v, want a barrier before the publish", attached, log.events)
		}
		log.mu.Unlock()
	}
}

// TestDispatcherKeepsAnnouncedBehindBacklog checks that the messages
// announced while a device's window is full are kept for their turn, the
// oldest first: behind a backlog of Window of them, one more announced is
// the only message read back from the store when PUBACKs free the window.
func TestDispatcherKeepsAnnouncedBehindBacklog(t *testing.T) {
	f := newFixture(t)
	counted := &readCountStore{Store: f.st}
	f.d.store = counted
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	r, idle := f.route(), f.idle
	// The connection's first flush reads the queue: done before the
	// first send, it cannot read a message its Notify has not announced
	// yet.
	eventually(t, "the first flush done", idle)
	var sent []int64
	for i := range Window {
		sent = append(sent, f.send(t, 60))
		eventually(t, "the message sent", func() bool { return len(c.received()) == i+1 && idle() })
	}
	for range Window + 1 { // announced while the window is full
		sent = append(sent, f.send(t, 60))
		eventually(t, "the flush done", idle)
	}
	if n := counted.read.Load(); n != 0 {
		t.Fatalf("%d messages read before any PUBACK, want 0", n)
	}
	for i, id := range sent {
		f.ack(t, c, id)
		if i%8 == 7 { // PUBACKs stored a few at a time, as under load
			eventually(t, "the PUBACKs stored", func() bool {
				r.mu.Lock()
				defer r.mu.Unlock()
				_, waiting := r.sent[id]
				return !waiting
			})
		}
	}
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v", got, sent)
	}
	if n := counted.read.Load(); n != 1 {
		t.Fatalf("%d messages read back, want 1 (the one announced past Window held)", n)
	}
}

// TestAckWritesOverlap checks that a whole batch of PUBACKs waiting starts
// another write while one is under way (waiting for its fsync), and that
// fewer wait for the write under way.
func TestAckWritesOverlap(t *testing.T) {
	d, gated, r := ackStageFixture(t, false)
	writes := gated.writes
	id := int64(1 << 40) // no such message: each write fails, which is enough here
	d.acks.add(ack{r: r, id: id})
	eventually(t, "the first write", func() bool { return len(writes()) == 1 })
	for range ackBatch - 1 {
		id++
		d.acks.add(ack{r: r, id: id})
	}
	time.Sleep(50 * time.Millisecond)
	if got := writes(); !slices.Equal(got, []int{1}) {
		t.Fatalf("writes %v with less than a batch waiting, want the first alone", got)
	}
	id++
	d.acks.add(ack{r: r, id: id})
	eventually(t, "a second write while the first waits", func() bool { return len(writes()) == 2 })
	if got := writes(); got[1] != ackBatch {
		t.Fatalf("second write of %d PUBACKs, want %d", got[1], ackBatch)
	}
	close(gated.open)
	eventually(t, "the writers gone", func() bool {
		d.acks.mu.Lock()
		defer d.acks.mu.Unlock()
		return d.acks.running == 0 && len(d.acks.queue) == 0
	})
}

// TestNewConnectionWaitsForOlderAcks: a device that PUBACKs and connects
// again at once is not sent the acknowledged message again. The new
// connection reads the queue only once the older connection's PUBACKs
// are stored, and then gets what is pending, nothing more.
func TestNewConnectionWaitsForOlderAcks(t *testing.T) {
	for _, detach := range []bool{true, false} { // closed first, or taken over
		f := newFixture(t)
		gated := &gatedStore{Store: f.st, open: make(chan struct{})}
		f.d = NewDispatcher(gated, slog.New(slog.NewTextHandler(io.Discard, nil)))
		f.d.now = func() time.Time { return f.clock }
		id := f.send(t, 60)
		c1 := &conn{}
		f.d.Attach(c1, "app", "dev-1")
		eventually(t, "the message on the first connection", func() bool { return len(c1.received()) == 1 })
		c1.mu.Lock()
		pid := c1.pids[id]
		c1.mu.Unlock()
		f.d.Acked(c1, "app", "dev-1", pid)
		eventually(t, "the PUBACK's write under way", func() bool {
			gated.mu.Lock()
			defer gated.mu.Unlock()
			return len(gated.sizes) == 1
		})
		if detach {
			f.d.Detach(c1, "app", "dev-1")
		}
		c2 := &conn{}
		f.d.Attach(c2, "app", "dev-1")
		time.Sleep(100 * time.Millisecond)
		if got := c2.received(); len(got) != 0 {
			t.Fatalf("detach %v: the new connection got %v while the older one's PUBACK was being stored", detach, got)
		}
		close(gated.open)
		eventually(t, "the delivery stored", func() bool { st, _ := f.state(t, id); return st == store.StateDelivered })
		next := f.send(t, 60) // announced to the fixture's first dispatcher: wake this one
		f.d.Wake("app", "dev-1")
		eventually(t, "the next message on the new connection", func() bool { return slices.Equal(c2.received(), []int64{next}) })
	}
}

// TestAckWritesGrowWithTheQueue checks that PUBACKs that gathered while
// every writer waited (for a slow fsync) are stored in fewer, larger
// writes, not ackBatch at a time: that capped deliveries at what four
// writes of ackBatch per fsync could store.
func TestAckWritesGrowWithTheQueue(t *testing.T) {
	d, gated, r := ackStageFixture(t, true)
	writes := gated.writes
	id := int64(1 << 40) // no such message: each write fails, which is enough here
	add := func(n int) {
		for range n {
			id++
			d.acks.add(ack{r: r, id: id})
		}
	}
	add(1)
	eventually(t, "the first write", func() bool { return len(writes()) == 1 })
	for w := 2; w <= ackWriters; w++ { // every writer waiting
		add(ackBatch)
		eventually(t, "another write", func() bool { return len(writes()) == w })
	}
	const waiting = 3 * ackWriteMax / 2
	add(waiting)
	close(gated.open)
	eventually(t, "the writers gone", func() bool {
		d.acks.mu.Lock()
		defer d.acks.mu.Unlock()
		return d.acks.running == 0 && len(d.acks.queue) == 0
	})
	later := writes()[ackWriters:]
	if len(later) > 2 || slices.Max(later) != ackWriteMax {
		t.Fatalf("the %d PUBACKs that gathered were written %v at a time, want at most %d a write, in 2", waiting, later, ackWriteMax)
	}
}
