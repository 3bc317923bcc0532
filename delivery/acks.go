package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// ackBatch is how many PUBACKs waiting start another write while one is
// under way (up to ackWriters).
const ackBatch = 256

// ackWriteMax is the most PUBACKs one store write records. It bounds the
// device stripes the write holds while it is applied (not while it
// waits for its fsync). A write took at most ackBatch before: when the
// fsyncs slowed (the disk busy with a memtable flush or compaction), the
// four writers stored 17,000 to 24,000 PUBACKs a second in fan-out,
// every device's window filled with messages acknowledged but not yet
// stored, and deliveries stopped for up to a second while sends went on
// (docs/perf-notes.md, "Deliveries and PUBACKs").
const ackWriteMax = 16 * ackBatch

// ackWriters is the most writes of PUBACKs under way at once. A write
// waits for its fsync, and one writer alone capped fan-out's deliveries
// at ackBatch per write's CPU time plus fsync and scheduling delay (a
// device's window frees only when its PUBACKs are stored); a second
// writer starts only when a whole batch is waiting, so below that rate
// writes stay as large as before.
const ackWriters = 4

// ack is a PUBACK waiting for its message's delivery to be stored.
type ack struct {
	r  *route
	id int64
	// counted says Acked counted it in the device's and route's acking.
	counted bool
}

// ackStage stores PUBACKs many at a time (a writeStage): each write
// marks up to ackWriteMax messages acknowledged, with their records, in
// one store.UpdateMessages (on Pebble one batch and one fsync); when
// ackBatch are waiting another write starts, up to ackWriters.
//
// The device has its PUBACK answered already; what waits is the delivered
// state and its record. A message stays in its route's sent set until its
// write is done, so no flush sends it again meanwhile; a crash before the
// write leaves it pending, to be sent again on the next connection, which
// QoS 1 allows. A delivery success record is written only by the write
// that moves the message out of pending, so exactly once.
type ackStage = writeStage[ack]

// newAckStage returns d's ack stage.
func newAckStage(d *Dispatcher) *ackStage {
	return &ackStage{batch: ackBatch, max: ackWriteMax, writers: ackWriters, write: d.storeAcks}
}

// storeAcks marks the acknowledged messages delivered, then frees their
// places in their windows and wakes the routes with messages waiting.
func (d *Dispatcher) storeAcks(batch []ack) {
	now := d.now()
	deliver := func(m *store.Message) error {
		if m.State != store.StatePending {
			return errSkip
		}
		m.State = store.StateDelivered
		m.Records = append(m.Records, message.NewRecord(*m, store.RecordDeliverySuccess, 0, "", now))
		return nil
	}
	updates := make([]store.MessageUpdate, len(batch))
	for i, a := range batch {
		updates[i] = store.MessageUpdate{AppKey: a.r.app, ID: a.id, Fn: deliver}
	}
	errs, err := d.store.UpdateMessages(context.Background(), updates)
	kicks, starts := map[*route]bool{}, map[*route]bool{}
	for i, a := range batch {
		e := err
		if e == nil {
			e = errs[i]
		}
		switch {
		case e == nil:
			d.delivered.Add(1)
		case !errors.Is(e, errSkip):
			d.log.Error("record delivery", "app", a.r.app, "device", a.r.dev, "msgid", a.id, "err", e)
			// Still pending in the store: send it again on this
			// connection once the store is back, rather than at the
			// next message.
			app, dev := a.r.app, a.r.dev
			time.AfterFunc(retryAfterStoreError, func() { d.Wake(app, dev) })
		}
		switch kick, deferred := a.r.ackedStored(a.id); {
		case kick:
			kicks[a.r] = true
		case deferred:
			starts[a.r] = true // to applyAcked after the flush under way
		}
		if cur := d.acked(a); cur != nil {
			kicks[cur] = true
		}
	}
	for r := range kicks {
		d.kick(r)
	}
	for r := range starts {
		d.start(r)
	}
}

// errSkip leaves a message as it is from inside an UpdateMessage.
var errSkip = errors.New("no change")

// Acked records the device's PUBACK of packet id pid on connection c:
// the message it carried is delivered, unless it left the pending state
// meanwhile (expired, retracted), which stands. The write is left to the
// ack stage (see acks.go), so the connection's read loop never waits for
// the store; the message keeps its place in the window until it is done.
// It reports whether pid was a message's.
func (d *Dispatcher) Acked(c Conn, app, dev string, pid uint16) bool {
	d.mu.Lock()
	r := d.routes[routeKey(app, dev)]
	if r == nil || r.conn != c {
		// A message sent before the connection unsubscribed (a new
		// SUBSCRIBE on it takes this route back: route).
		r = d.unsubscribed[routeKey(app, dev)]
	}
	d.mu.Unlock()
	if r == nil || r.conn != c {
		return false
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
		return false // a PUBACK of a control publish (a desired document, a cancel)
	}
	k := routeKey(app, dev)
	d.mu.Lock()
	if d.acking == nil {
		d.acking = map[routeID]int{}
	}
	d.acking[k]++
	d.mu.Unlock()
	d.acks.add(ack{r: r, id: id, counted: true})
	return true
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
