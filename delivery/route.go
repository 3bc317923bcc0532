package delivery

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/store"
)

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

// routeID names a device's route: a key of two strings, not one joined,
// which cost an allocation per lookup (2% of the server in fan-out, with
// the Pebble store's caches).
type routeID struct{ app, dev string }

func routeKey(app, dev string) routeID { return routeID{app, dev} }

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
