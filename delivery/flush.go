package delivery

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

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
	complete := len(ids) < n+r.window
	d.forgetLeft(r, ids, complete)
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
	d.sendLoaded(ctx, r, msgs)
}

// forgetLeft forgets the sent messages that left the queue without a
// PUBACK on this connection (expired, retracted), so they stop holding
// the window: those the queue read ids covered (the queue is in msgid
// order; complete: ids is the whole queue) but did not find. Nearly
// always every sent message is still queued, and counting them by the
// ids read is cheaper than looking each up in ids. Under r.mu.
func (d *Dispatcher) forgetLeft(r *route, ids []int64, complete bool) {
	n := len(r.sent)
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
		d.uncountLeft(r)
	}
}

// uncountConn is a windowConn that can stop counting a packet in flight
// (broker.Session).
type uncountConn interface{ Uncount(pid uint16) }

// uncountLeft has the connection's window stop counting the packets in
// flight whose message left sent unacknowledged, as the route's own
// count does, unless the route is strict; the places they free go to
// the commands waiting first (windowFreed). Under r.mu.
func (d *Dispatcher) uncountLeft(r *route) {
	uc, ok := r.conn.(uncountConn)
	if !ok || r.strict {
		return
	}
	n := 0
	for pid, id := range r.inflight {
		if _, sent := r.sent[id]; !sent {
			uc.Uncount(pid)
			n++
		}
	}
	if f := d.windowFreed; n > 0 && f != nil {
		go f(r.conn, r.app, r.dev) // it publishes: not under r.mu
	}
}

// sendLoaded publishes the messages flush loaded that are still pending
// and not expired, after a Barrier unless each is known durable, and
// records those a read found unannounced (addReadSent). Under r.mu.
func (d *Dispatcher) sendLoaded(ctx context.Context, r *route, msgs []loaded) {
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
	n, ok := d.publishAll(r, send)
	if !ok || n == 0 {
		return
	}
	// Those beyond the window were not sent (send is in msgid order): a
	// later read finds them.
	last := send[n-1].ID
	for _, id := range unannounced {
		if id <= last {
			r.addReadSent(id)
		}
	}
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
	sent, _ := d.publishAll(r, send)
	for _, m := range send[:sent] {
		r.seen = max(r.seen, m.ID)
	}
	return true
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

// windowConn is a Conn that keeps the device's window itself, shared by
// messages and commands (broker.Session): PublishWithin sends, in
// order, the payloads that fit in a window of limit unacknowledged
// publishes, less the places commands wait for, and returns their
// packet ids.
type windowConn interface {
	PublishWithin(limit int, topic string, payloads [][]byte) ([]uint16, error)
}

// publishAll is publish for msgs, in order, with one write when r's
// connection can; ok false when the connection is going away. n is how
// many were sent: fewer than msgs when the connection's window, which
// commands share and go first in, is full. The others stay queued, and
// the route is left to read the queue when a place frees (backlog).
func (d *Dispatcher) publishAll(r *route, msgs []store.Message) (n int, ok bool) {
	if len(msgs) == 0 {
		return 0, true
	}
	if wc, isWindow := r.conn.(windowConn); isWindow {
		pids, err := wc.PublishWithin(r.window, TopicMsg, devicePayloads(msgs))
		if err != nil {
			d.log.Debug("publish messages", "app", r.app, "device", r.dev, "msgids", len(msgs), "err", err)
			return 0, false
		}
		for i, pid := range pids {
			d.recordSent(r, pid, msgs[i].ID)
		}
		if len(pids) < len(msgs) {
			r.backlog = true
			r.scan.Store(true)
		}
		return len(pids), true
	}
	c, isAll := r.conn.(allConn)
	if !isAll || len(msgs) < 2 {
		for i, m := range msgs {
			if !d.publish(r, m) {
				return i, false
			}
		}
		return len(msgs), true
	}
	payloads := devicePayloads(msgs)
	pids, err := c.PublishAll(TopicMsg, payloads, 1)
	if err != nil {
		d.log.Debug("publish messages", "app", r.app, "device", r.dev, "msgids", len(msgs), "err", err)
		return 0, false
	}
	for i, m := range msgs {
		d.recordSent(r, pids[i], m.ID)
	}
	return len(msgs), true
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
