package delivery

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// conn records what the dispatcher publishes, as a device would see it.
type conn struct {
	mu   sync.Mutex
	pid  uint16
	got  []int64          // msgids in arrival order
	pids map[int64]uint16 // msgid → packet id of its latest publish
}

func (c *conn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	var p struct{ Msgid string }
	if topic != TopicMsg || qos != 1 || json.Unmarshal(payload, &p) != nil {
		panic("unexpected publish " + topic + " " + string(payload))
	}
	id, _ := strconv.ParseInt(p.Msgid, 10, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid++
	c.got = append(c.got, id)
	if c.pids == nil {
		c.pids = map[int64]uint16{}
	}
	c.pids[id] = c.pid
	return c.pid, nil
}

func (c *conn) received() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

type fixture struct {
	st    *pebble.Store
	d     *Dispatcher
	svc   *message.Service
	ids   *idgen.Generator
	app   store.App
	clock time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	f := &fixture{st: st, app: store.App{Key: "app", Name: "a"}, clock: time.Now()}
	if err := st.CreateApp(ctx, f.app); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	f.ids, _ = idgen.New(0)
	f.d = NewDispatcher(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.d.now = func() time.Time { return f.clock }
	f.svc = message.NewService(st, f.ids, Local(f.d))
	f.svc.SetClock(f.d.now)
	return f
}

// route returns dev-1's route.
func (f *fixture) route() *route {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	return f.d.routes[routeKey("app", "dev-1")]
}

// idle reports whether no flush of dev-1's route is under way.
func (f *fixture) idle() bool { return f.route().idle() }

// idle reports whether no flush of r is under way.
func (r *route) idle() bool {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	return !r.running
}

// ack sends c's PUBACK of message id once c has received it.
func (f *fixture) ack(t *testing.T, c *conn, id int64) { t.Helper(); f.ackOn(t, c, c, id) }

// ackOn is ack for connection on, which records what it receives in c.
func (f *fixture) ackOn(t *testing.T, on Conn, c *conn, id int64) {
	t.Helper()
	eventually(t, "message sent", func() bool { return slices.Contains(c.received(), id) })
	c.mu.Lock()
	pid := c.pids[id]
	c.mu.Unlock()
	f.d.Acked(on, "app", "dev-1", pid)
}

// sendN sends n messages with ttl 60 and returns their msgids in order.
func (f *fixture) sendN(t *testing.T, n int) []int64 {
	t.Helper()
	sent := make([]int64, n)
	for i := range sent {
		sent[i] = f.send(t, 60)
	}
	return sent
}

func (f *fixture) send(t *testing.T, ttl int64) int64 {
	t.Helper()
	dev, err := f.st.GetDevice(context.Background(), "app", "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.svc.Send(context.Background(), f.app, dev, message.SendRequest{Body: "b", TTL: ttl}, 0, func(int64) *store.SeqEntry { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

func (f *fixture) state(t *testing.T, id int64) (string, []int) {
	t.Helper()
	m, err := f.st.GetMessage(context.Background(), "app", id)
	if err != nil {
		t.Fatal(err)
	}
	var types []int
	for _, r := range m.Records {
		types = append(types, r.Type)
	}
	return m.State, types
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestDispatcherDeliversInOrderWithinWindow(t *testing.T) {
	f := newFixture(t)
	var sent []int64
	for range Window + 10 {
		sent = append(sent, f.send(t, 60))
	}
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "a full window", func() bool { return len(c.received()) == Window })
	time.Sleep(50 * time.Millisecond)
	if got := c.received(); !slices.Equal(got, sent[:Window]) {
		t.Fatalf("sent %v, want the first %d in send order", got, Window)
	}
	// Each PUBACK delivers its message and frees a slot for the next.
	for i, id := range sent {
		f.ack(t, c, id)
		eventually(t, "the delivery stored", func() bool { st, _ := f.state(t, id); return st == store.StateDelivered })
		if _, types := f.state(t, id); !slices.Equal(types, []int{0, 2, 4}) {
			t.Fatalf("message %d after PUBACK: %v", i, types)
		}
	}
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v exactly once each", got, sent)
	}
}

func TestDispatcherRedeliversOnNewConnection(t *testing.T) {
	f := newFixture(t)
	id := f.send(t, 60)
	first := &conn{}
	f.d.Attach(first, "app", "dev-1")
	eventually(t, "first delivery", func() bool { return len(first.received()) == 1 })
	f.d.Detach(first, "app", "dev-1") // disconnected without a PUBACK
	f.d.Acked(first, "app", "dev-1", 1)
	if st, _ := f.state(t, id); st != store.StatePending {
		t.Fatalf("a PUBACK on a detached connection changed the message to %s", st)
	}
	second := &conn{}
	f.d.Attach(second, "app", "dev-1")
	eventually(t, "redelivery", func() bool { return slices.Equal(second.received(), []int64{id}) })
	f.d.Acked(second, "app", "dev-1", 1)
	eventually(t, "the redelivery's PUBACK stored", func() bool { st, _ := f.state(t, id); return st == store.StateDelivered })
	// A second SUBSCRIBE on the same connection sends nothing again.
	f.d.Attach(second, "app", "dev-1")
	time.Sleep(50 * time.Millisecond)
	if got := second.received(); len(got) != 1 {
		t.Fatalf("resubscribe sent %v again", got)
	}
}

func TestDispatcherExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	keep, expire := f.send(t, 60), f.send(t, 1)
	f.clock = f.clock.Add(1*time.Second + ExpiryGrace)
	must(t, f.d.ExpireDue(ctx))
	if st, _ := f.state(t, expire); st != store.StatePending {
		t.Fatalf("expired within the grace period: %s", st)
	}
	f.clock = f.clock.Add(time.Second)
	must(t, f.d.ExpireDue(ctx))
	st, types := f.state(t, expire)
	m, _ := f.st.GetMessage(ctx, "app", expire)
	if st != store.StateExpired || !slices.Equal(types, []int{0, 2, 5}) || m.Records[2].Error.Code != message.ErrCodeTTLExpired {
		t.Fatalf("after ttl and grace: %s %v", st, types)
	}
	if st, _ := f.state(t, keep); st != store.StatePending {
		t.Fatalf("a live message became %s", st)
	}
	// An expired message is never sent, even before the sweeper runs.
	late := f.send(t, 1)
	f.clock = f.clock.Add(2 * time.Second)
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "delivery", func() bool { return len(c.received()) == 1 })
	time.Sleep(50 * time.Millisecond)
	if got := c.received(); !slices.Equal(got, []int64{keep}) {
		t.Fatalf("sent %v, want only %d (not the expired %d)", got, keep, late)
	}
}

func TestTTLZero(t *testing.T) {
	f := newFixture(t)
	offline := f.send(t, 0)
	if st, types := f.state(t, offline); st != store.StateFailed || !slices.Equal(types, []int{0, 2, 5}) {
		t.Fatalf("ttl 0 to an offline device: %s %v", st, types)
	}
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	online := f.send(t, 0)
	eventually(t, "ttl 0 delivery", func() bool { return slices.Equal(c.received(), []int64{online}) })
}

func TestRetractAndClick(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a, b := f.send(t, 60), f.send(t, 60)
	m, err := f.svc.Retract(ctx, "app", a)
	if err != nil || m.State != store.StateRetracted || m.Records[len(m.Records)-1].Type != store.RecordRetractSuccess {
		t.Fatalf("retract pending: %+v %v", m, err)
	}
	m, _ = f.svc.Retract(ctx, "app", a)
	if r := m.Records[len(m.Records)-1]; m.State != store.StateRetracted || r.Type != store.RecordRetractionFailed || r.Error.Code != message.ErrCodeAlreadyFinished {
		t.Fatalf("retract retracted: %+v", m)
	}
	c := &conn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "delivery", func() bool { return len(c.received()) == 1 })
	if got := c.received(); got[0] != b {
		t.Fatalf("sent %v; the retracted %d must never be", got, a)
	}
	f.d.Acked(c, "app", "dev-1", 1)
	eventually(t, "the PUBACK stored", func() bool { st, _ := f.state(t, b); return st == store.StateDelivered })
	m, _ = f.svc.Retract(ctx, "app", b)
	if r := m.Records[len(m.Records)-1]; m.State != store.StateDelivered || r.Error == nil || r.Error.Code != message.ErrCodeAlreadyDelivered {
		t.Fatalf("retract delivered: %+v", m)
	}
	must(t, f.d.Click(ctx, "app", "dev-1", b))
	if _, types := f.state(t, b); !slices.Equal(types, []int{0, 2, 4, 8, 6}) {
		t.Fatalf("records after click: %v", types)
	}
	if err := f.d.Click(ctx, "app", "dev-2", b); err == nil {
		t.Fatal("another device clicked this device's message")
	}
	if _, err := f.svc.Retract(ctx, "other-app", b); err == nil {
		t.Fatal("another app retracted the message")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// orderLog records the order of reads, barriers and publishes.
type orderLog struct {
	mu     sync.Mutex
	events []string
}

func (l *orderLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// barrierStore logs queue reads and Barrier calls.
type barrierStore struct {
	store.Store
	log *orderLog
}

func (s barrierStore) PendingIDs(ctx context.Context, app, dev string, limit int) ([]int64, error) {
	s.log.add("read")
	return s.Store.PendingIDs(ctx, app, dev, limit)
}

func (s barrierStore) PendingMessages(ctx context.Context, app, dev string, limit int) ([]store.Message, error) {
	s.log.add("read")
	return s.Store.PendingMessages(ctx, app, dev, limit)
}

func (s barrierStore) Barrier(ctx context.Context) error {
	s.log.add("barrier")
	return s.Store.Barrier(ctx)
}

type loggingConn struct {
	conn
	log *orderLog
}

func (c *loggingConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	c.log.add("publish")
	return c.conn.Publish(topic, payload, qos)
}

// TestDispatcherWaitsForDurability checks that a message read from the
// queue is published only after a Barrier that follows the read: a
// device must never get a message whose write a crash could still undo.
func TestDispatcherWaitsForDurability(t *testing.T) {
	f := newFixture(t)
	log := &orderLog{}
	d := NewDispatcher(barrierStore{f.st, log}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 3 {
		f.send(t, 60)
	}
	c := &loggingConn{log: log}
	d.Attach(c, "app", "dev-1")
	eventually(t, "3 messages sent", func() bool { return len(c.received()) == 3 })
	log.mu.Lock()
	defer log.mu.Unlock()
	synced := false
	for i, e := range log.events {
		switch e {
		case "read":
			synced = false
		case "barrier":
			synced = true
		case "publish":
			if !synced {
				t.Fatalf("event %d: publish with no barrier since the read: %v", i, log.events)
			}
		}
	}
}

// idConn logs each publish with its msgid.
type idConn struct {
	conn
	log *orderLog
}

func (c *idConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	pid, err := c.conn.Publish(topic, payload, qos)
	c.log.add("publish " + strconv.FormatInt(c.received()[len(c.received())-1], 10))
	return pid, err
}

// TestDispatcherSkipsBarrierForNotifiedMessages checks the rule that
// spares a delivery its second fsync wait: a message announced by Notify
// (its CreateMessage had returned, so it is durable) is published with no
// Barrier, while a message the read found without a Notify is published
// only after a Barrier that follows the read.
func TestDispatcherSkipsBarrierForNotifiedMessages(t *testing.T) {
	f := newFixture(t)
	log := &orderLog{}
	f.d.store = barrierStore{f.st, log}
	c := &idConn{log: log}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "the first read", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.events) > 0
	})

	// One sent message: published with no Barrier.
	first := f.send(t, 60)
	eventually(t, "the first message sent", func() bool { return len(c.received()) == 1 })
	log.mu.Lock()
	if slices.Contains(log.events, "barrier") {
		t.Errorf("a notified message waited for a Barrier: %v", log.events)
	}
	log.events = nil
	log.mu.Unlock()
	f.d.Acked(c, "app", "dev-1", c.pids[first])

	// A message written with no Notify (a Wake announces it below), then
	// a notified one before it in the queue (the first takes a msgid ahead
	// of the generator's): the notified message is published at once,
	// without a read or a Barrier; the Wake's read finds the other, which
	// is published only after a Barrier that follows the read.
	quiet := store.Message{ID: f.ids.Next() + 1<<30, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
		TimeCreate: f.clock.Unix(), ExpireTime: f.clock.Unix() + 60, State: store.StatePending}
	if err := f.st.CreateMessage(context.Background(), quiet, 0, nil); err != nil {
		t.Fatal(err)
	}
	notified := f.send(t, 60)
	eventually(t, "the notified message sent", func() bool { return len(c.received()) == 2 })
	f.d.Wake("app", "dev-1")
	eventually(t, "both messages sent", func() bool { return len(c.received()) == 3 })
	log.mu.Lock()
	defer log.mu.Unlock()
	var got []string
	for _, e := range log.events {
		if e == "read" && slices.Contains(got, "read") {
			break // a second read after the publishes
		}
		got = append(got, e)
	}
	want := []string{"publish " + strconv.FormatInt(notified, 10), "read", "barrier", "publish " + strconv.FormatInt(quiet.ID, 10)}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// TestRouteLookupDoesNotAllocate: a route is found without joining the
// app key and device name into a new string (a real app key and name are
// longer than the 32 bytes Go joins on the stack).
func TestRouteLookupDoesNotAllocate(t *testing.T) {
	d := NewDispatcher(nil, slog.New(slog.DiscardHandler))
	app, dev := "app-0123456789abcdef0123456789", "device-0123456789"
	if n := testing.AllocsPerRun(100, func() { d.Online(app, dev) }); n != 0 {
		t.Fatalf("route lookup: %v allocations", n)
	}
}
