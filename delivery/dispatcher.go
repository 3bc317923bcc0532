package delivery

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// TopicMsg is the topic, under a device's prefix, that carries messages.
const TopicMsg = "msg"

const (
	// Window is the most messages one device has unacknowledged at once
	// (fewer when its MQTT 5 Receive Maximum is smaller: windowFor).
	// Pending messages beyond it are sent as acknowledgements arrive.
	Window = 64
	// ExpiryGrace is how long after its expire_time a pending message is
	// declared expired, so a PUBACK already on its way still counts. The
	// store compares whole seconds (ExpiredMessages: before the second
	// before) and the sweep runs every sweepEvery, so it is 3 to 4 s in
	// all, as device-protocol.md says.
	ExpiryGrace = 2 * time.Second
	sweepEvery  = time.Second
	sweepBatch  = 512
	// retryAfterStoreError is when a message whose delivery could not be
	// stored, or that could not be sent for a store error, is sent again.
	retryAfterStoreError = time.Second
	// wakeAllAtOnce is how many connections WakeAll wakes before pausing.
	wakeAllAtOnce = 256
)

// Conn is a device's live connection as the broker provides it.
type Conn interface {
	// Publish sends payload on topic (relative to the device's prefix) and
	// returns the packet id the device's PUBACK will carry.
	Publish(topic string, payload []byte, qos byte) (uint16, error)
}

// Store is what the Dispatcher needs of the store: the device queues it
// reads to send, the message writes of deliveries, expiries, failures and
// clicks, and Barrier before it hands a device what a read found.
type Store interface {
	PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error)
	PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error)
	GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error)
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error)
	UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error)
	ExpiredMessages(ctx context.Context, before int64, limit int) ([]store.Message, error)
	Barrier(ctx context.Context) error
}

var _ Store = store.Store(nil)

// Dispatcher delivers pending messages to connected devices and moves
// each message to delivered (on the device's PUBACK) or expired (at its
// TTL). The store's pending queue is the only record: the dispatcher's
// state is per connection, and a new connection starts from the queue,
// so anything unacknowledged is sent again.
type Dispatcher struct {
	store Store
	log   *slog.Logger
	now   func() time.Time
	// maxHold bounds how long a flush holds announced messages for the
	// PUBACKs of those in flight (defaultMaxHold; see hold).
	maxHold time.Duration

	mu     sync.Mutex
	routes map[routeID]*route // by app and device name
	// unsubscribed holds, by app and device name, the route of a
	// connection that unsubscribed from msg while it had messages in
	// flight: their PUBACKs still count (Unsubscribe).
	unsubscribed map[routeID]*route
	// acking counts, by app and device name, the PUBACKs waiting in the
	// ack stage for their delivery to be stored, whichever connection
	// they came on (route.acking counts a route's own).
	acking map[routeID]int

	// Counts since start, for metrics.
	published, delivered, expired atomic.Int64

	acks *ackStage
	// windowFreed, when set, is told of places a connection's messages
	// left in its window without a PUBACK (SetWindowFreed).
	windowFreed func(c Conn, app, dev string)
	// idleFlushers hands a route to a flusher waiting for one
	// (runFlusher); unbuffered, so a route is never left in it.
	idleFlushers chan *route

	stop, done chan struct{}
}

// Local returns the message.Router of a node on its own: d alone, with
// no other node to reach.
func Local(d *Dispatcher) message.Router { return local{d} }

type local struct{ d *Dispatcher }

var _ message.Router = local{}

func (l local) Online(dev store.Device) bool           { return l.d.Online(dev.AppKey, dev.Name) }
func (l local) Notify(m store.Message, _ store.Device) { l.d.Notify(m) }

// NewDispatcher returns a Dispatcher; Start begins expiring messages.
func NewDispatcher(st Store, log *slog.Logger) *Dispatcher {
	d := &Dispatcher{store: st, log: log, now: time.Now, maxHold: defaultMaxHold, routes: map[routeID]*route{}, idleFlushers: make(chan *route)}
	d.acks = newAckStage(d)
	return d
}

// Attach starts delivery to a connection that subscribed to msg. A
// repeated SUBSCRIBE on the same connection sends what is pending and
// not yet sent on it; a new connection gets everything pending again.
func (d *Dispatcher) Attach(c Conn, app, dev string) {
	d.kick(d.route(c, app, dev))
}

// route returns the connection's route, made if it has none. A new
// route reads the queue at its first flush, whatever wakes it: a Notify
// that comes before Attach's own wake must not send its message ahead
// of the older ones pending.
func (d *Dispatcher) route(c Conn, app, dev string) *route {
	k := routeKey(app, dev)
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.routes[k]
	if r == nil || r.conn != c {
		if u := d.unsubscribed[k]; u != nil && u.conn == c {
			// Subscribed anew: it goes on where it stopped, so what is
			// in flight is neither sent again nor counted twice.
			delete(d.unsubscribed, k)
			u.detached.Store(false)
			d.routes[k] = u
			return u
		}
		r = &route{app: app, dev: dev, conn: c}
		r.window, r.strict = windowFor(c)
		r.scan.Store(true)
		d.routes[k] = r
	}
	return r
}

// Detach stops delivery to a connection that ended. A newer connection
// of the same device keeps its route.
func (d *Dispatcher) Detach(c Conn, app, dev string) {
	k := routeKey(app, dev)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.routes[k]; r != nil && r.conn == c {
		r.detached.Store(true)
		delete(d.routes, k)
	}
	if r := d.unsubscribed[k]; r != nil && r.conn == c {
		delete(d.unsubscribed, k)
	}
}

// Unsubscribe stops delivery to a connection that unsubscribed from msg
// and is still open. A PUBACK of a message in flight on it still records
// its delivery (before, it was ignored and the message sent again), and
// a new SUBSCRIBE on the connection takes the route back (route): what
// is in flight is not sent again, which would also have exceeded an
// MQTT 5 device's Receive Maximum.
func (d *Dispatcher) Unsubscribe(c Conn, app, dev string) {
	k := routeKey(app, dev)
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.routes[k]
	if r == nil || r.conn != c {
		return
	}
	r.detached.Store(true)
	delete(d.routes, k)
	if d.unsubscribed == nil {
		d.unsubscribed = map[routeID]*route{}
	}
	d.unsubscribed[k] = r
}

// Online reports whether the device has a connection subscribed to msg.
func (d *Dispatcher) Online(app, dev string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.routes[routeKey(app, dev)] != nil
}

// Notify tells the dispatcher that m was queued, by a write that is
// durable: the store's CreateMessage returned (a 200 means that). Sending
// m then needs no Barrier. A message of a broadcast may be announced as
// soon as its step returns, before it is durable: it is sent after a
// Barrier. Any other message that may not be durable yet must be
// announced by Wake instead.
func (d *Dispatcher) Notify(m store.Message) {
	d.mu.Lock()
	r := d.routes[routeKey(m.AppKey, m.DeviceName)]
	d.mu.Unlock()
	if r != nil {
		r.addDurable(m)
		d.start(r)
	}
}

// Wake has the device's connection, if it is subscribed here, send what
// is pending and not yet sent on it.
func (d *Dispatcher) Wake(app, dev string) {
	d.mu.Lock()
	r := d.routes[routeKey(app, dev)]
	d.mu.Unlock()
	if r != nil {
		d.kick(r)
	}
}

// WakeAll wakes every subscribed connection, so that messages queued
// without word reaching this dispatcher are sent. It pauses after every
// wakeAllAtOnce, so a node with many devices does not burst the store.
func (d *Dispatcher) WakeAll() {
	d.mu.Lock()
	routes := make([]*route, 0, len(d.routes))
	for _, r := range d.routes {
		routes = append(routes, r)
	}
	d.mu.Unlock()
	for i, r := range routes {
		d.kick(r)
		if i%wakeAllAtOnce == wakeAllAtOnce-1 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// kick has the route flush, reading the queue.
func (d *Dispatcher) kick(r *route) {
	r.scan.Store(true)
	d.start(r)
}

// start has the route flush: at once unless a flush is under way, else
// once more after it.
func (d *Dispatcher) start(r *route) {
	r.runMu.Lock()
	if r.running {
		r.again = true
		r.runMu.Unlock()
		return
	}
	r.running = true
	r.runMu.Unlock()
	// An idle flusher takes it if one waits (see runFlusher).
	select {
	case d.idleFlushers <- r:
	default:
		go d.runFlusher(r)
	}
}

// Stats are counts since the dispatcher started.
type Stats struct {
	// Published counts messages written to devices, redeliveries included.
	Published int64
	// Delivered and Expired count messages that reached those states.
	Delivered, Expired int64
	// Routes is the number of devices subscribed to msg right now.
	Routes int
}

// Stats returns the dispatcher's counts.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	n := len(d.routes)
	d.mu.Unlock()
	return Stats{Published: d.published.Load(), Delivered: d.delivered.Load(), Expired: d.expired.Load(), Routes: n}
}

// Click records that the device's user clicked message id (record 6). A
// message of another device, or none, is store.ErrNotFound.
func (d *Dispatcher) Click(ctx context.Context, appKey, dev string, id int64) error {
	_, err := d.store.UpdateMessage(ctx, appKey, id, func(m *store.Message) error {
		if m.DeviceName != dev {
			return store.ErrNotFound
		}
		m.Records = append(m.Records, message.NewRecord(*m, store.RecordClick, 0, "", d.now()))
		return nil
	})
	return err
}

// SetWindowFreed has the dispatcher tell f when messages that left the
// queue unacknowledged give up their places in a connection's window, so
// that commands waiting for a place take them first
// (CommandSender.Drain): call before devices connect.
func (d *Dispatcher) SetWindowFreed(f func(c Conn, app, dev string)) { d.windowFreed = f }

// Freed tells the dispatcher that a place in the window of the device's
// connection c freed that no message held (a command's PUBACK, a command
// given up): the connection's messages waiting for a place go now.
func (d *Dispatcher) Freed(c Conn, app, dev string) {
	d.mu.Lock()
	r := d.routes[routeKey(app, dev)]
	d.mu.Unlock()
	if r == nil || r.conn != c {
		return
	}
	if r.mu.TryLock() { // else a flush is under way: kick has it run again
		backlog := r.backlog
		r.mu.Unlock()
		if !backlog {
			return
		}
	}
	d.kick(r)
}
