package message

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TopicMsg is the topic, under a device's prefix, that carries messages.
const TopicMsg = "msg"

const (
	// Window is the most messages one device has unacknowledged at once.
	// Pending messages beyond it are sent as acknowledgements arrive.
	Window = 64
	// ExpiryGrace is how long after its expire_time a pending message is
	// declared expired, so a PUBACK already on its way still counts.
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

	mu     sync.Mutex
	routes map[string]*route // by app and device name

	// Counts since start, for metrics.
	published, delivered, expired atomic.Int64

	stop, done chan struct{}
}

// route is the delivery state of one connection subscribed to msg.
type route struct {
	app, dev string
	conn     Conn

	mu       sync.Mutex
	inflight map[uint16]int64   // packet id → msgid
	sent     map[int64]struct{} // msgids sent on this connection
	running  bool               // a flush is under way
	again    bool               // flush once more when it ends
	backlog  bool               // the last flush left messages unsent

	// durable holds msgids that Notify announced: their writes are
	// durable, so publishing them needs no Barrier. It has a lock of its
	// own so that a send's Notify never waits for a flush under way.
	// Dropping an entry is always safe (it costs a Barrier), so it is
	// cleared when it reaches Window entries rather than tracked exactly.
	durableMu sync.Mutex
	durable   map[int64]struct{}
}

// isDurable reports whether id was announced durable, and forgets it:
// it is called once per message, just before the message is published.
func (r *route) isDurable(id int64) bool {
	r.durableMu.Lock()
	defer r.durableMu.Unlock()
	_, ok := r.durable[id]
	delete(r.durable, id)
	return ok
}

func (r *route) addDurable(id int64) {
	r.durableMu.Lock()
	defer r.durableMu.Unlock()
	if r.durable == nil || len(r.durable) >= Window {
		r.durable = map[int64]struct{}{}
	}
	r.durable[id] = struct{}{}
}

// NewDispatcher returns a Dispatcher; Start begins expiring messages.
func NewDispatcher(st store.Store, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: st, log: log, now: time.Now, routes: map[string]*route{}}
}

func routeKey(app, dev string) string { return app + "\x00" + dev }

// Attach starts delivery to a connection that subscribed to msg. A
// repeated SUBSCRIBE on the same connection sends what is pending and
// not yet sent on it; a new connection gets everything pending again.
func (d *Dispatcher) Attach(c Conn, app, dev string) {
	k := routeKey(app, dev)
	d.mu.Lock()
	r := d.routes[k]
	if r == nil || r.conn != c {
		r = &route{app: app, dev: dev, conn: c, inflight: map[uint16]int64{}, sent: map[int64]struct{}{}}
		d.routes[k] = r
	}
	d.mu.Unlock()
	d.kick(r)
}

// Detach stops delivery to a connection that ended. A newer connection
// of the same device keeps its route.
func (d *Dispatcher) Detach(c Conn, app, dev string) {
	k := routeKey(app, dev)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.routes[k]; r != nil && r.conn == c {
		delete(d.routes, k)
	}
}

// Online reports whether the device has a connection subscribed to msg.
func (d *Dispatcher) Online(app, dev string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.routes[routeKey(app, dev)] != nil
}

// Notify tells the dispatcher that m was queued, by a write that is
// durable: the store's CreateMessage returned (a 200 means that). Sending
// m then needs no Barrier. A message that may not be durable yet must be
// announced by Wake instead.
func (d *Dispatcher) Notify(m store.Message) {
	d.mu.Lock()
	r := d.routes[routeKey(m.AppKey, m.DeviceName)]
	d.mu.Unlock()
	if r != nil {
		r.addDurable(m.ID)
		d.kick(r)
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

func (d *Dispatcher) kick(r *route) {
	r.mu.Lock()
	if r.running {
		r.again = true
		r.mu.Unlock()
		return
	}
	r.running = true
	r.mu.Unlock()
	go func() {
		for {
			d.flush(r)
			r.mu.Lock()
			if !r.again {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.again = false
			r.mu.Unlock()
		}
	}()
}

// payload is the JSON a device receives on msg (DESIGN.md section 3).
type payload struct {
	MsgID      string `json:"msgid"`
	Body       string `json:"msg_body"`
	SentTime   int64  `json:"sent_time"`
	ExpireTime int64  `json:"expire_time"`
}

// flush sends the route's pending messages that are not yet sent on its
// connection, in send order, up to Window unacknowledged. It holds r.mu
// from the queue read to the last write: Acked forgets a message only
// after its delivery is stored, so a read that still saw it pending is
// never followed by sending it again.
func (d *Dispatcher) flush(r *route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.sent)
	msgs, err := d.store.PendingMessages(context.Background(), r.app, r.dev, n+Window)
	if err != nil {
		d.log.Error("load pending messages", "app", r.app, "device", r.dev, "err", err)
		return
	}
	// Forget sent messages that left the queue without a PUBACK on this
	// connection (expired, retracted), so they stop holding the window:
	// those the read covered (the queue is in msgid order) but did not find.
	complete := len(msgs) < n+Window
	for id := range r.sent {
		if (complete || id < msgs[len(msgs)-1].ID) && !slices.ContainsFunc(msgs, func(m store.Message) bool { return m.ID == id }) {
			delete(r.sent, id)
		}
	}
	now := d.now().Unix()
	r.backlog = len(msgs) == n+Window
	synced := false
	for _, m := range msgs {
		if _, ok := r.sent[m.ID]; ok {
			continue
		}
		if len(r.sent) >= Window {
			r.backlog = true
			return
		}
		if now > m.ExpireTime {
			continue // the sweeper records it as expired
		}
		body, err := json.Marshal(payload{strconv.FormatInt(m.ID, 10), m.Body, m.TimeCreate, m.ExpireTime})
		if err != nil {
			d.log.Error("encode message", "msgid", m.ID, "err", err)
			continue
		}
		// The read may have seen a message whose write is not durable
		// yet: a device must never get one that a crash could take back
		// (and its sender, retrying, store again under a new msgid). One
		// barrier covers the whole read. A message that Notify announced
		// is durable already: its CreateMessage had returned, so no
		// barrier is needed for it.
		if durable := r.isDurable(m.ID); !synced && !durable {
			if err := d.store.Barrier(context.Background()); err != nil {
				d.log.Error("wait for pending messages to be durable", "app", r.app, "device", r.dev, "err", err)
				time.AfterFunc(retryAfterStoreError, func() { d.Wake(r.app, r.dev) })
				return
			}
			synced = true
		}
		// Still under r.mu, so Acked cannot see the PUBACK before the
		// packet id is recorded.
		pid, err := r.conn.Publish(TopicMsg, body, 1)
		if err != nil {
			// The connection is going away; its successor starts over.
			d.log.Debug("publish message", "app", r.app, "device", r.dev, "msgid", m.ID, "err", err)
			return
		}
		r.inflight[pid] = m.ID
		r.sent[m.ID] = struct{}{}
		d.published.Add(1)
	}
}

// errSkip leaves a message as it is from inside an UpdateMessage.
var errSkip = errors.New("no change")

// Acked records the device's PUBACK of packet id pid on connection c:
// the message it carried is delivered, unless it left the pending state
// meanwhile (expired, retracted), which stands.
func (d *Dispatcher) Acked(c Conn, app, dev string, pid uint16) {
	d.mu.Lock()
	r := d.routes[routeKey(app, dev)]
	d.mu.Unlock()
	if r == nil || r.conn != c {
		return
	}
	r.mu.Lock()
	id, ok := r.inflight[pid]
	delete(r.inflight, pid)
	r.mu.Unlock()
	if !ok {
		return // a PUBACK of a property publish
	}
	defer func() {
		r.mu.Lock()
		delete(r.sent, id)
		backlog := r.backlog
		r.mu.Unlock()
		if backlog {
			d.kick(r)
		}
	}()
	_, err := d.store.UpdateMessage(context.Background(), app, id, func(m *store.Message) error {
		if m.State != store.StatePending {
			return errSkip
		}
		m.State = store.StateDelivered
		m.Records = append(m.Records, NewRecord(*m, store.RecordDeliverySuccess, 0, "", d.now()))
		return nil
	})
	switch {
	case err == nil:
		d.delivered.Add(1)
	case !errors.Is(err, errSkip):
		d.log.Error("record delivery", "app", app, "device", dev, "msgid", id, "err", err)
		// Still pending in the store: send it again on this connection
		// once the store is back, rather than at the next message.
		time.AfterFunc(retryAfterStoreError, func() { d.Wake(app, dev) })
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
		for _, m := range msgs {
			if err := d.fail(ctx, m, store.StateExpired, ErrCodeTTLExpired, "ttl expired"); err != nil {
				return err
			}
			d.expired.Add(1)
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
	_, err := d.store.UpdateMessage(ctx, m.AppKey, m.ID, func(m *store.Message) error {
		if m.State != store.StatePending {
			return errSkip
		}
		m.State = state
		m.Records = append(m.Records, NewRecord(*m, store.RecordDeliveryFailure, code, reason, d.now()))
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// Click records that the device's user clicked message id (record 6). A
// message of another device, or none, is store.ErrNotFound.
func (d *Dispatcher) Click(ctx context.Context, appKey, dev string, id int64) error {
	_, err := d.store.UpdateMessage(ctx, appKey, id, func(m *store.Message) error {
		if m.DeviceName != dev {
			return store.ErrNotFound
		}
		m.Records = append(m.Records, NewRecord(*m, store.RecordClick, 0, "", d.now()))
		return nil
	})
	return err
}

// NewRecord builds a status record of message m as it is stored: the
// fields m already holds are left for Records to fill in, which halves the
// bytes written per message. errCode 0 means no error object.
func NewRecord(m store.Message, typ, errCode int, errMsg string, now time.Time) store.Record {
	r := store.Record{Type: typ, SentTime: now.Unix()}
	if errCode != 0 {
		r.Error = &store.RecordError{Code: errCode, Message: errMsg}
	}
	return r
}

// Records returns m's status records in the callback format, every field
// filled in.
func Records(m store.Message) []store.Record {
	out := make([]store.Record, len(m.Records))
	for i, r := range m.Records {
		out[i] = m.Filled(r)
	}
	return out
}
