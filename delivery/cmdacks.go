package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// cmdAckBatch is the most delivered states one store write records, and
// how many waiting start a second writer while one is under way.
const cmdAckBatch = 256

// cmdAckWriters is the most writes of delivered states under way at once:
// one write's fsync does not hold up the next.
const cmdAckWriters = 2

// cmdAckLinger is how long after its PUBACK a delivered state is written
// at the earliest. Most commands are answered within it, and a command
// the answer ended is left as it is: the answer's write records the
// delivery too (command.Service.Answer), and the delivered state's write
// is skipped. Under command-batch load a delivered write per command was
// three more memtable entries and another synced commit, for a state the
// answer replaced a millisecond later.
const cmdAckLinger = 10 * time.Millisecond

// cmdAck is a command's PUBACK, at the Unix ms at, waiting for its
// delivered state to be stored; queued is when it was queued.
type cmdAck struct {
	ref    cmdRef
	at     int64
	queued time.Time
}

// cmdAckStage stores the delivered states of commands many at a time,
// as the ack stage stores messages' PUBACKs (acks.go): a writeStage whose
// writes are one synced store write each (store.CommandBatcher), off
// the device's read loop.
//
// The delivered state is durable once written (command.DeliveredAt);
// until then a crash leaves the command sent, to be sent again with the
// same cmd_id on the device's next connection, as one whose PUBACK
// never came. An answer stored first stands: the delivered state leaves
// an ended command alone.
type cmdAckStage struct {
	stage  *writeStage[cmdAck]
	linger time.Duration // cmdAckLinger; tests lengthen it
	// hurry, closed by flush, ends the linger of every write.
	hurry     chan struct{}
	hurryOnce sync.Once

	mu sync.Mutex
	// pending counts, by command id, the PUBACKs waiting or being
	// written: Attach does not send such a command again.
	pending map[int64]int
	// idle is signalled when pending empties (flush).
	idle *sync.Cond
}

// newCmdAckStage returns cs's stage of delivered states.
func newCmdAckStage(cs *CommandSender) *cmdAckStage {
	s := &cmdAckStage{pending: map[int64]int{}, linger: cmdAckLinger, hurry: make(chan struct{})}
	s.idle = sync.NewCond(&s.mu)
	s.stage = &writeStage[cmdAck]{batch: cmdAckBatch, max: cmdAckBatch, writers: cmdAckWriters, write: func(batch []cmdAck) {
		// The oldest is first: the others have lingered less.
		if d := time.Until(batch[0].queued.Add(s.linger)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.hurry:
				t.Stop()
			}
		}
		cs.storeDelivered(batch)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, a := range batch {
			if s.pending[a.ref.id]--; s.pending[a.ref.id] <= 0 {
				delete(s.pending, a.ref.id)
			}
		}
		if len(s.pending) == 0 {
			s.idle.Broadcast()
		}
	}}
	return s
}

// flush ends the linger of the writes waiting, and of any later one,
// and returns once no PUBACK waits for its write.
func (s *cmdAckStage) flush() {
	s.hurryOnce.Do(func() { close(s.hurry) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 {
		s.idle.Wait()
	}
}

// add queues a PUBACK for its write.
func (s *cmdAckStage) add(a cmdAck) {
	a.queued = time.Now()
	s.mu.Lock()
	s.pending[a.ref.id]++
	s.mu.Unlock()
	s.stage.add(a)
}

// acking reports whether command id's PUBACK came and its delivered
// state is not stored yet.
func (s *cmdAckStage) acking(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[id] > 0
}

// storeDelivered writes the delivered states of batch: in one write
// where the store can, else one by one.
func (cs *CommandSender) storeDelivered(batch []cmdAck) {
	ctx := context.Background()
	errs := make([]error, len(batch))
	var err error
	if b, ok := cs.store.(store.CommandBatcher); ok {
		updates := make([]store.CommandUpdate, len(batch))
		for i, a := range batch {
			updates[i] = store.CommandUpdate{AppKey: a.ref.app, ID: a.ref.id, Fn: command.DeliveredAt(a.ref.dev, a.at)}
		}
		var es []error
		_, es, err = b.UpdateCommands(ctx, updates, nil)
		if err == nil {
			copy(errs, es)
		}
	}
	if _, ok := cs.store.(store.CommandBatcher); !ok || errors.Is(err, errors.ErrUnsupported) {
		err = nil
		for i, a := range batch {
			_, errs[i] = cs.store.UpdateCommand(ctx, a.ref.app, a.ref.id, command.DeliveredAt(a.ref.dev, a.at))
		}
	}
	for i, a := range batch {
		e := err
		if e == nil {
			e = errs[i]
		}
		if e != nil && !errors.Is(e, command.ErrUnchanged) && !errors.Is(e, store.ErrNotFound) {
			cs.log.Error("record a command delivered", "app", a.ref.app, "device", a.ref.dev, "cmd_id", a.ref.id, "err", e)
		}
	}
}
