package message

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// ackBatch is the most PUBACKs one store write records. It bounds the
// device stripes the write holds while it is applied.
const ackBatch = 256

// ack is a PUBACK waiting for its message's delivery to be stored.
type ack struct {
	r  *route
	id int64
}

// ackStage stores PUBACKs many at a time: each write marks every message
// acknowledged since the last one delivered, with its record, in one
// store.UpdateMessages (on Pebble one batch and one fsync). One goroutine
// writes while acknowledgements gather for the next write, and exists
// only while there is something to write.
//
// The device has its PUBACK answered already; what waits is the delivered
// state and its record. A message stays in its route's sent set until its
// write is done, so no flush sends it again meanwhile; a crash before the
// write leaves it pending, to be sent again on the next connection, which
// QoS 1 allows. A delivery success record is written only by the write
// that moves the message out of pending, so exactly once.
type ackStage struct {
	mu      sync.Mutex
	queue   []ack
	running bool
}

// add queues a and starts the writer if none runs.
func (s *ackStage) add(d *Dispatcher, a ack) {
	s.mu.Lock()
	s.queue = append(s.queue, a)
	if s.running {
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	go s.run(d)
}

// run writes queued acknowledgements until none is left.
func (s *ackStage) run(d *Dispatcher) {
	for {
		s.mu.Lock()
		n := min(len(s.queue), ackBatch)
		if n == 0 {
			s.queue, s.running = nil, false
			s.mu.Unlock()
			return
		}
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		s.mu.Unlock()
		d.storeAcks(batch)
	}
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
		m.Records = append(m.Records, NewRecord(*m, store.RecordDeliverySuccess, 0, "", now))
		return nil
	}
	updates := make([]store.MessageUpdate, len(batch))
	for i, a := range batch {
		updates[i] = store.MessageUpdate{AppKey: a.r.app, ID: a.id, Fn: deliver}
	}
	errs, err := d.store.UpdateMessages(context.Background(), updates)
	kicks := map[*route]bool{}
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
		a.r.mu.Lock()
		delete(a.r.sent, a.id)
		if a.r.backlog {
			kicks[a.r] = true
		}
		a.r.mu.Unlock()
	}
	for r := range kicks {
		d.kick(r)
	}
}
