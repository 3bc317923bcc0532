package delivery

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
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

// Dispatcher delivers pending messages to connected devices and moves
// each message to delivered (on the device's PUBACK) or expired (at its
// TTL). The store's pending queue is the only record: the dispatcher's
// state is per connection, and a new connection starts from the queue,
// so anything unacknowledged is sent again.
type Dispatcher struct {
	store store.Store
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

	acks ackStage
	// idleFlushers hands a route to a flusher waiting for one
	// (runFlusher); unbuffered, so a route is never left in it.
	idleFlushers chan *route

	stop, done chan struct{}
}

// route is the delivery state of one connection subscribed to msg.
type route struct {
	app, dev string
	conn     Conn
	// window is the most messages the connection has unacknowledged at
	// once: Window, or fewer when the device said so (windowFor).
	// strict says the device declared a Receive Maximum of at most
	// Window: a message that left the queue unacknowledged (expired,
	// retracted) keeps its place until its PUBACK (occupied), as the
	// device still counts it.
	window int
	strict bool
	// detached says the connection unsubscribed or ended: a flush sends
	// nothing (a hold timer or a stored PUBACK may still start one).
	detached atomic.Bool

	// mu is held by a flush from its queue read to its last write to the
	// device, which waits up to the broker's write timeout when the
	// device stops reading: what every device's work goes through
	// (start, the ack stage) takes runMu, ackedMu or atomics instead.
	mu       sync.Mutex
	inflight map[uint16]int64   // packet id → msgid
	sent     map[int64]struct{} // msgids sent on this connection
	backlog  bool               // the last flush left messages unsent

	runMu   sync.Mutex
	running bool // a flush is under way; under runMu
	again   bool // flush once more when it ends; under runMu

	// acked holds msgids whose delivery the ack stage stored while a
	// flush held mu; the next flush forgets them from sent (applyAcked).
	ackedMu sync.Mutex
	acked   []int64
	// holding says announced messages wait in durable for the PUBACKs
	// of those in flight (see flushNotified); the last PUBACK flushes,
	// or holdTimer d.maxHold after holdSince, whichever comes first.
	holding   bool
	holdSince time.Time
	holdTimer *time.Timer
	// acking counts this connection's PUBACKs waiting in the ack stage.
	acking atomic.Int32
	// seen is the highest msgid a queue read found or flushNotified
	// sent.
	seen int64
	// readSent holds msgids that a queue read sent with no Notify
	// having announced them, so that a Notify that comes late sends
	// nothing again; it holds at most readSentMax, and when it is
	// cleared lost is set to seen: an announced message at or below lost
	// may have been handled by a read, so it is left to a read.
	readSent map[int64]struct{}
	lost     int64

	// durable holds the messages that Notify announced: their writes are
	// durable, so publishing them needs no Barrier, and flush need not
	// read them back. It has a lock of its own so that a send's Notify
	// never waits for a flush under way. Dropping an entry is always safe
	// (it costs a read and a Barrier), so it holds at most Window entries
	// (see addDurable) rather than everything announced.
	durableMu sync.Mutex
	durable   map[int64]store.Message

	// scan says the next flush reads the queue: something other than a
	// Notify woke the route (a new connection, Wake, a PUBACK freeing a
	// slot of a backlogged window, a store error), or an announced
	// message was dropped from durable. While it is false, the queue
	// holds nothing unsent but the messages in durable, and a flush
	// sends those without reading the store (flushNotified).
	scan atomic.Bool
}

// takeDurable returns message id if Notify announced it, and forgets it:
// it is called once per message, just before the message is published.
func (r *route) takeDurable(id int64) (store.Message, bool) {
	r.durableMu.Lock()
	defer r.durableMu.Unlock()
	m, ok := r.durable[id]
	delete(r.durable, id)
	return m, ok
}

// addDurable keeps m for the next flush, unless durable holds Window
// messages already: those are kept (the oldest announced, so the next to
// be sent behind a backlog) and m is left to a read. Clearing the map
// when full, as before, dropped every message a backlogged device was
// announced before its turn came, and each was read back from the store.
func (r *route) addDurable(m store.Message) {
	r.durableMu.Lock()
	defer r.durableMu.Unlock()
	if r.durable == nil {
		r.durable = map[int64]store.Message{}
	}
	if len(r.durable) >= Window {
		r.scan.Store(true) // m is found by a read
		return
	}
	r.durable[m.ID] = m
}

// receiveMaxConn is a Conn whose device may take fewer messages
// unacknowledged than Window (broker.Session: MQTT 5's Receive Maximum,
// 0 when the device set none).
type receiveMaxConn interface{ ReceiveMaximum() int }

// windowFor is the window of connection c: Window, or the device's
// Receive Maximum when that is smaller. MQTT 5 forbids sending a client
// more QoS 1 publishes unacknowledged than it declared [MQTT-3.3.4-9]; a
// device that declared 5 was sent 64. strict: it declared at most
// Window (see route.strict).
func windowFor(c Conn) (window int, strict bool) {
	if rc, ok := c.(receiveMaxConn); ok {
		if n := rc.ReceiveMaximum(); n > 0 && n <= Window {
			return n, true
		}
	}
	return Window, false
}

// occupied is how many places of r's window are taken: the messages
// sent and not yet stored as acknowledged, and for a strict route also
// the packets in flight whose message left that set unacknowledged
// (expired, retracted). Under r.mu.
func (r *route) occupied() int {
	n := len(r.sent)
	if r.strict {
		for _, id := range r.inflight {
			if _, ok := r.sent[id]; !ok {
				n++
			}
		}
	}
	return n
}

// Local returns the message.Router of a node on its own: d alone, with
// no other node to reach.
func Local(d *Dispatcher) message.Router { return local{d} }

type local struct{ d *Dispatcher }

var _ message.Router = local{}

func (l local) Online(dev store.Device) bool           { return l.d.Online(dev.AppKey, dev.Name) }
func (l local) Notify(m store.Message, _ store.Device) { l.d.Notify(m) }

// NewDispatcher returns a Dispatcher; Start begins expiring messages.
func NewDispatcher(st store.Store, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: st, log: log, now: time.Now, maxHold: defaultMaxHold, routes: map[routeID]*route{}, idleFlushers: make(chan *route)}
}

// routeID names a device's route: a key of two strings, not one joined,
// which cost an allocation per lookup (2% of the server in fan-out, with
// the Pebble store's caches).
type routeID struct{ app, dev string }

func routeKey(app, dev string) routeID { return routeID{app, dev} }

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

// defaultMaxHold is the longest flushNotified holds a device's announced
// messages for the PUBACKs of those in flight. Without a bound, a device
// slow to acknowledge, or one that never acknowledges a message (its
// packet id stays in flight until the connection ends, even after the
// message expires), would get nothing more until it did; with it, what
// gathered goes out together at most this late.
const defaultMaxHold = 50 * time.Millisecond

// hold reports whether r's announced messages still wait for a PUBACK:
// from the first flush that holds them for at most d.maxHold, after
// which a timer flushes r. The caller holds r.mu.
func (d *Dispatcher) hold(r *route) bool {
	now := time.Now()
	if r.holding {
		return now.Sub(r.holdSince) < d.maxHold
	}
	r.holding, r.holdSince = true, now
	if r.holdTimer == nil {
		r.holdTimer = time.AfterFunc(d.maxHold, func() { d.start(r) })
	} else {
		r.holdTimer.Reset(d.maxHold)
	}
	return true
}

// flush sends the route's pending messages that are not yet sent on its
// connection, in send order, up to r.window unacknowledged. It holds r.mu
// from the queue read to the last write: Acked forgets a message only
// after its delivery is stored, so a read that still saw it pending is
// never followed by sending it again.
//
// It reads only the queue's msgids, and then only the messages it is
// about to send and does not hold already (Notify hands it the message a
// send stored): a device with a full window is woken by every send and
// every PUBACK, and reading back its whole window each time made the
// reads the largest cost of fan-out.
func (d *Dispatcher) flush(r *route) {
	if r.detached.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyAcked()
	if !r.scan.Swap(false) && d.flushNotified(r) {
		return
	}
	if d.ackingElsewhere(r) {
		// An older connection of the device had PUBACKs whose deliveries
		// are not stored yet: the queue still holds those messages, and
		// reading it now would send them again. storeAcks wakes this
		// route once they are stored.
		r.scan.Store(true)
		return
	}
	ctx := context.Background()
	n := len(r.sent)
	ids, err := d.store.PendingIDs(ctx, r.app, r.dev, n+r.window)
	if err != nil {
		d.log.Error("load pending messages", "app", r.app, "device", r.dev, "err", err)
		return
	}
	// Forget sent messages that left the queue without a PUBACK on this
	// connection (expired, retracted), so they stop holding the window:
	// those the read covered (the queue is in msgid order) but did not find.
	// Nearly always every sent message is still queued, and counting
	// them by the ids read is cheaper than looking each up in ids.
	complete := len(ids) < n+r.window
	queued := 0
	for _, id := range ids {
		if _, ok := r.sent[id]; ok {
			queued++
		}
	}
	if queued < n {
		for id := range r.sent {
			if _, found := slices.BinarySearch(ids, id); !found && (complete || id < ids[len(ids)-1]) {
				delete(r.sent, id)
			}
		}
	}
	r.forgetHandled(ids, complete)
	r.backlog = len(ids) == n+r.window
	occupied := r.occupied()
	var todo []int64 // in send order
	for _, id := range ids {
		if _, ok := r.sent[id]; ok {
			continue
		}
		if occupied+len(todo) >= r.window {
			r.backlog = true
			break
		}
		todo = append(todo, id)
	}
	if len(todo) == 0 {
		return
	}
	msgs, err := d.load(ctx, r, todo, n == 0)
	if err != nil {
		d.log.Error("load pending messages", "app", r.app, "device", r.dev, "err", err)
		time.AfterFunc(retryAfterStoreError, func() { d.Wake(r.app, r.dev) })
		return
	}
	now := d.now().Unix()
	synced := false
	send := make([]store.Message, 0, len(msgs))
	var unannounced []int64
	for _, l := range msgs {
		m := l.m
		if m.State != store.StatePending || now > m.ExpireTime {
			continue // left the queue since the read, or the sweeper records it as expired
		}
		// The read may have seen a message whose write is not durable
		// yet: a device must never get one that a crash could take back
		// (and its sender, retrying, store again under a new msgid). One
		// barrier covers the whole read: the queue entry and the message
		// are in one write, so a barrier after the queue read covers
		// every message it names. A message that Notify announced is
		// durable already: its CreateMessage had returned, so no barrier
		// is needed for it.
		if !synced && !l.durable() {
			if err := d.store.Barrier(ctx); err != nil {
				d.log.Error("wait for pending messages to be durable", "app", r.app, "device", r.dev, "err", err)
				time.AfterFunc(retryAfterStoreError, func() { d.Wake(r.app, r.dev) })
				return
			}
			synced = true
		}
		send = append(send, m)
		if !l.announced {
			unannounced = append(unannounced, m.ID)
		}
	}
	// One write for them all: a device that connects with messages
	// pending was sent up to Window writes of one message.
	if !d.publishAll(r, send) {
		return
	}
	for _, id := range unannounced {
		r.addReadSent(id)
	}
}

// ackedStored records that message id's delivery is stored: it leaves
// sent, freeing its place in the window, and the route flushes again if
// its window was full. The ack stage calls it for every device, so it
// never waits for a flush that holds r.mu (one blocked writing to a
// device that stopped reading held every device's PUBACKs up to the
// write timeout): a flush under way gets the id by applyAcked and is
// made to run once more. kick: the window was full, so the caller has
// the route read its queue; deferred: the id waits for applyAcked, so
// the caller starts a flush (start) to apply it.
func (r *route) ackedStored(id int64) (kick, deferred bool) {
	if r.mu.TryLock() {
		delete(r.sent, id)
		kick = r.backlog
		r.mu.Unlock()
		return kick, false
	}
	r.ackedMu.Lock()
	r.acked = append(r.acked, id)
	r.ackedMu.Unlock()
	return false, true
}

// applyAcked forgets from sent the deliveries ackedStored left to the
// flush, and has the flush read the queue if the window was full, as the
// ack stage's kick would have. Under r.mu.
func (r *route) applyAcked() {
	r.ackedMu.Lock()
	ids := r.acked
	r.acked = nil
	r.ackedMu.Unlock()
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		delete(r.sent, id)
	}
	if r.backlog {
		r.scan.Store(true)
	}
}

// readSentMax bounds route.readSent.
const readSentMax = 4 * Window

// addReadSent records that a read sent message id unannounced.
func (r *route) addReadSent(id int64) {
	if r.readSent == nil || len(r.readSent) >= readSentMax {
		if len(r.readSent) > 0 {
			r.lost = r.seen
		}
		r.readSent = map[int64]struct{}{}
	}
	r.readSent[id] = struct{}{}
}

// flushNotified sends the messages Notify announced, in msgid order,
// when that is all there is to send: no read since the last one found
// the queue changed otherwise (r.scan is false), the window had room for
// everything pending then (no backlog), and it has room for all of them
// now. It reports false, having sent nothing, when a queue read is
// needed. Messages stored concurrently may be announced out of msgid
// order; each is sent as its announcement comes, as a read would send
// them in the order their writes became visible. The messages are
// durable (see Notify), so no Barrier. In fan-out nearly every flush is
// one of these, and the queue reads they save were a quarter of the
// server's CPU: a device's queue range holds the tombstones of its
// delivered messages until compaction.
//
// A message retracted or expired between its Notify and this flush is
// sent as it would be by a flush that read the queue just before the
// retraction; one that expired is left to the sweeper.
func (d *Dispatcher) flushNotified(r *route) bool {
	if r.backlog {
		return false
	}
	r.durableMu.Lock()
	n := 0
	for id := range r.durable {
		// A read may have sent it before its Notify came.
		if _, ok := r.sent[id]; ok {
			delete(r.durable, id)
			continue
		}
		if _, ok := r.readSent[id]; ok {
			delete(r.durable, id)
			delete(r.readSent, id)
			continue
		}
		if id <= r.lost {
			r.durableMu.Unlock()
			return false
		}
		n++
	}
	if r.occupied()+n > r.window {
		r.durableMu.Unlock()
		return false
	}
	if _, batches := r.conn.(allConn); batches && n > 0 && len(r.inflight) > 0 && d.hold(r) {
		// Wait for the PUBACKs of what is in flight, as TCP's Nagle
		// waits for ACKs, and send what gathered meanwhile with one
		// write: one write(2) per message was 12 to 17% of the server's
		// CPU in fan-out, where a flush found a message in flight half
		// the time. It costs a message at most d.maxHold. Holding more
		// than Window is left to a read (addDurable). Only a connection
		// that writes several messages at once gains from it.
		r.durableMu.Unlock()
		return true
	}
	r.holding = false
	// Taken only now that they go: a Message is large, and half the
	// flushes in fan-out held theirs.
	msgsp := flushSlices.Get().(*[]store.Message)
	defer func() {
		clear(*msgsp) // drop the bodies
		*msgsp = (*msgsp)[:0]
		flushSlices.Put(msgsp)
	}()
	msgs := slices.Grow(*msgsp, n)
	for id, m := range r.durable {
		msgs = append(msgs, m)
		delete(r.durable, id)
	}
	*msgsp = msgs
	r.durableMu.Unlock()
	slices.SortFunc(msgs, func(a, b store.Message) int { return cmp.Compare(a.ID, b.ID) })
	now := d.now().Unix()
	synced := false
	send := msgs[:0]
	for _, m := range msgs {
		if now > m.ExpireTime {
			continue // the sweeper records it as expired
		}
		if !synced && m.Broadcast != 0 { // see loaded.durable
			if err := d.store.Barrier(context.Background()); err != nil {
				d.log.Error("wait for pending messages to be durable", "app", r.app, "device", r.dev, "err", err)
				// They are still queued: a read finds them.
				time.AfterFunc(retryAfterStoreError, func() { d.Wake(r.app, r.dev) })
				return true
			}
			synced = true
		}
		send = append(send, m)
	}
	if d.publishAll(r, send) {
		for _, m := range send {
			r.seen = max(r.seen, m.ID)
		}
	}
	return true
}

// forgetHandled drops the announced messages that the queue read ids
// (complete: the whole queue) settles: those sent already, and those no
// longer queued, at or below the last id read (or below seen, when the
// read was the whole queue). The others stay for load. A dropped message
// that was not queued may have been stored and announced just after the
// read, so the next flush reads the queue again.
func (r *route) forgetHandled(ids []int64, complete bool) {
	bound := int64(0)
	if len(ids) > 0 {
		bound = ids[len(ids)-1]
		r.seen = max(r.seen, bound)
	}
	if complete {
		bound = r.seen
	}
	r.durableMu.Lock()
	defer r.durableMu.Unlock()
	for id := range r.durable {
		if id > bound {
			continue
		}
		if _, sent := r.sent[id]; sent {
			delete(r.durable, id)
		} else if _, queued := slices.BinarySearch(ids, id); !queued {
			delete(r.durable, id)
			r.scan.Store(true)
		}
	}
}

// flushSlices holds flushNotified's message slices for reuse: a
// Message is 168 bytes, and every flush made a slice of them. Nothing
// keeps the slice past the flush (a publish records only the id).
var flushSlices = sync.Pool{New: func() any { return new([]store.Message) }}

// publish sends m on r's connection and records it in flight; false when
// the connection is going away (its successor starts over). The caller
// holds r.mu, so Acked cannot see the PUBACK before the packet id is
// recorded.
func (d *Dispatcher) publish(r *route, m store.Message) bool {
	pid, err := r.conn.Publish(TopicMsg, devicePayload(m), 1)
	if err != nil {
		d.log.Debug("publish message", "app", r.app, "device", r.dev, "msgid", m.ID, "err", err)
		return false
	}
	d.recordSent(r, pid, m.ID)
	return true
}

// recordSent records message id in flight on r with packet id pid. Under r.mu.
func (d *Dispatcher) recordSent(r *route, pid uint16, id int64) {
	if r.inflight == nil { // made at the first message: an idle device costs no maps
		r.inflight, r.sent = map[uint16]int64{}, map[int64]struct{}{}
	}
	r.inflight[pid] = id
	r.sent[id] = struct{}{}
	d.published.Add(1)
}

// allConn is a Conn that sends several messages with one write
// (broker.Session).
type allConn interface {
	PublishAll(topic string, payloads [][]byte, qos byte) ([]uint16, error)
}

// publishAll is publish for msgs, in order, with one write when r's
// connection can.
func (d *Dispatcher) publishAll(r *route, msgs []store.Message) bool {
	c, ok := r.conn.(allConn)
	if !ok || len(msgs) < 2 {
		for _, m := range msgs {
			if !d.publish(r, m) {
				return false
			}
		}
		return true
	}
	payloads := devicePayloads(msgs)
	pids, err := c.PublishAll(TopicMsg, payloads, 1)
	if err != nil {
		d.log.Debug("publish messages", "app", r.app, "device", r.dev, "msgids", len(msgs), "err", err)
		return false
	}
	for i, m := range msgs {
		d.recordSent(r, pids[i], m.ID)
	}
	return true
}

// loaded is a message flush is about to send; announced when Notify
// handed it over.
type loaded struct {
	m         store.Message
	announced bool
}

// durable reports whether the message is known durable without a
// Barrier: announced, and not of a broadcast, whose fan-out steps are
// stored without waiting for their fsync (store.Fleet.CreateMessages) and
// announced at once.
func (l loaded) durable() bool { return l.announced && l.m.Broadcast == 0 }

// load returns the messages ids (in their order) that are still in the
// store, taking those Notify announced from r and reading the others.
// fresh says nothing is in flight, so the queue's head is exactly ids:
// several unknown messages are then read with one PendingMessages (one
// round trip on Redis) rather than one GetMessage each.
func (d *Dispatcher) load(ctx context.Context, r *route, ids []int64, fresh bool) ([]loaded, error) {
	out := make([]loaded, len(ids))
	var unknown int
	for i, id := range ids {
		if m, ok := r.takeDurable(id); ok {
			out[i] = loaded{m, true}
		} else {
			unknown++
		}
	}
	var read map[int64]store.Message
	if fresh && unknown > 1 {
		msgs, err := d.store.PendingMessages(ctx, r.app, r.dev, len(ids))
		if err != nil {
			return nil, err
		}
		read = make(map[int64]store.Message, len(msgs))
		for _, m := range msgs {
			read[m.ID] = m
		}
	}
	kept := out[:0]
	for i, id := range ids {
		l := out[i]
		if !l.announced {
			if read != nil {
				m, ok := read[id]
				if !ok {
					continue // it left the queue since the read of ids
				}
				l.m = m
			} else {
				m, err := d.store.GetMessage(ctx, r.app, id)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				l.m = m
			}
		}
		kept = append(kept, l)
	}
	return kept, nil
}

// errSkip leaves a message as it is from inside an UpdateMessage.
var errSkip = errors.New("no change")

// Acked records the device's PUBACK of packet id pid on connection c:
// the message it carried is delivered, unless it left the pending state
// meanwhile (expired, retracted), which stands. The write is left to the
// ack stage (see acks.go), so the connection's read loop never waits for
// the store; the message keeps its place in the window until it is done.
func (d *Dispatcher) Acked(c Conn, app, dev string, pid uint16) {
	d.mu.Lock()
	r := d.routes[routeKey(app, dev)]
	if r == nil || r.conn != c {
		// A message sent before the connection unsubscribed (a new
		// SUBSCRIBE on it takes this route back: route).
		r = d.unsubscribed[routeKey(app, dev)]
	}
	d.mu.Unlock()
	if r == nil || r.conn != c {
		return
	}
	r.mu.Lock()
	id, ok := r.inflight[pid]
	delete(r.inflight, pid)
	// The route's count first, the device's second (and the reverse in
	// storeAcks), so that a flush of r never sees its own PUBACKs in
	// the device's count without them in its own: ackingElsewhere.
	if ok {
		r.acking.Add(1)
	}
	// The last PUBACK sends what flushNotified held for it.
	flush := ok && r.holding && len(r.inflight) == 0
	if flush {
		r.holding = false
		r.holdTimer.Stop() // its flush would find nothing held
	}
	r.mu.Unlock()
	if flush {
		d.start(r)
	}
	if !ok {
		return // a PUBACK of a property publish
	}
	k := routeKey(app, dev)
	d.mu.Lock()
	if d.acking == nil {
		d.acking = map[routeID]int{}
	}
	d.acking[k]++
	d.mu.Unlock()
	d.acks.add(d, ack{r: r, id: id, counted: true})
}

// ackingElsewhere reports whether PUBACKs that came on another
// connection of r's device wait in the ack stage. Under r.mu.
func (d *Dispatcher) ackingElsewhere(r *route) bool {
	d.mu.Lock()
	n := d.acking[routeKey(r.app, r.dev)]
	d.mu.Unlock()
	return n > int(r.acking.Load())
}

// acked ends a's wait in the ack stage, its delivery stored (or failed
// to be), and returns the device's route if that is another connection
// now, to be woken: it may have put off its queue read for a.
func (d *Dispatcher) acked(a ack) *route {
	if !a.counted {
		return nil
	}
	k := routeKey(a.r.app, a.r.dev)
	d.mu.Lock()
	if d.acking[k]--; d.acking[k] <= 0 {
		delete(d.acking, k)
	}
	cur := d.routes[k]
	d.mu.Unlock()
	a.r.acking.Add(-1)
	if cur != nil && cur != a.r {
		return cur
	}
	return nil
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

// Start runs the expiry sweeper until Stop.
func (d *Dispatcher) Start() {
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d.done)
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				if err := d.ExpireDue(context.Background()); err != nil {
					d.log.Error("expire messages", "err", err)
				}
			}
		}
	}()
}

// Stop ends the sweeper.
func (d *Dispatcher) Stop() {
	if d.stop != nil {
		close(d.stop)
		<-d.done
	}
}

// ExpireDue moves every pending message more than ExpiryGrace past its
// expire_time to expired, with record 5 (3005).
func (d *Dispatcher) ExpireDue(ctx context.Context) error {
	for {
		now := d.now()
		msgs, err := d.store.ExpiredMessages(ctx, now.Add(-ExpiryGrace).Unix(), sweepBatch)
		if err != nil {
			return err
		}
		// An expired message sent but not acknowledged frees its place in
		// the window: once the batch is recorded, each device's next
		// messages go, not at some later wake-up.
		devs := map[[2]string]bool{}
		for _, m := range msgs {
			if err := d.fail(ctx, m, store.StateExpired, message.ErrCodeTTLExpired, "ttl expired"); err != nil {
				return err
			}
			d.expired.Add(1)
			devs[[2]string{m.AppKey, m.DeviceName}] = true
		}
		for k := range devs {
			d.Wake(k[0], k[1])
		}
		if len(msgs) < sweepBatch {
			return nil
		}
	}
}

// FailPending moves every pending message of the device to failed with
// record 5 and the given code: 3003 when it is disabled, 3007 deleted.
func (d *Dispatcher) FailPending(ctx context.Context, app, dev string, code int, reason string) error {
	for {
		msgs, err := d.store.PendingMessages(ctx, app, dev, sweepBatch)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := d.fail(ctx, m, store.StateFailed, code, reason); err != nil {
				return err
			}
		}
		if len(msgs) < sweepBatch {
			return nil
		}
	}
}

func (d *Dispatcher) fail(ctx context.Context, m store.Message, state string, code int, reason string) error {
	return message.Fail(ctx, d.store, m, state, code, reason, d.now())
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
