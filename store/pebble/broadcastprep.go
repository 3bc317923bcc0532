package pebble

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// preparedStep is the work of a broadcast step's CreateMessages that
// needs none of the devices' stripes, done ahead by PrepareStep while the
// step before is written: the fan-out writes one step at a time, and that
// serial stage was its limit (CreateMessages of a step took three
// quarters of the writing goroutine; encoding the messages and reading
// the pending counts were a third of it).
type preparedStep struct {
	// msgs is the slice prepared for: a CreateMessages given another
	// ignores this one.
	msgs    []store.BatchMessage
	encoded []encodedMsg
	now     int64
	// counts are the devices' pending counts as read, each with its
	// countGen from before the read.
	counts map[string]preparedCount
	// keep says which messages msgCache takes: those to devices that were
	// connected. A broadcast's messages to offline devices are read
	// again only once their device connects, long after the cache has
	// forgotten them; caching them only pushed out the entries of the
	// messages being delivered.
	keep []bool
	// batch holds every message's stored entries (encodedMsg.stored),
	// in eachInKeyOrder's order, for the write to add the counts and the step to when
	// every message is stored as prepared; nil once taken. Filling it
	// was a fifth of the step's serial write.
	batch *pebble.Batch
}

// takeBatch returns p's batch, nil if p is nil or it was taken.
func (p *preparedStep) takeBatch() *pebble.Batch {
	if p == nil {
		return nil
	}
	b := p.batch
	p.batch = nil
	return b
}

type preparedCount struct {
	gen   uint64
	count int64
}

// PrepareStep encodes msgs, as a broadcast step will write them, and
// reads their devices' pending counts, for store.BroadcastStep.Prepared
// (an optional method outside the store.Store contract, which the
// fan-out looks for);
// connected[i] says msgs[i]'s device was connected when it was made (nil:
// all were). Nothing is locked or written: CreateMessages checks under
// the stripes that each count still holds (countGen) and reads again
// those that may not.
func (s *Store) PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	enc, err := s.encodeBatch(appKey, msgs)
	if err != nil {
		return nil, fmt.Errorf("prepare %d messages in %s: %w", len(msgs), appKey, err)
	}
	p := &preparedStep{msgs: msgs, encoded: enc.msgs, now: enc.now, counts: make(map[string]preparedCount, len(msgs)), keep: make([]bool, len(msgs))}
	var names []string
	for i, bm := range msgs {
		p.keep[i] = connected == nil || connected[i]
		name := bm.Message.DeviceName
		if bm.Message.State != store.StatePending {
			continue
		}
		if _, ok := p.counts[name]; ok {
			continue
		}
		// The generation is taken before the read, so a write of the
		// count that the read may have missed changes it.
		p.counts[name] = preparedCount{gen: s.pending.countGen(appKey, name)}
		names = append(names, name)
	}
	err = s.countQueues(appKey, names, func(i int, n int64) {
		c := p.counts[names[i]]
		c.count = n
		p.counts[names[i]] = c
	})
	if err != nil {
		return nil, fmt.Errorf("prepare %d messages in %s: %w", len(msgs), appKey, err)
	}
	p.batch = s.db.NewBatch()
	if err := eachInKeyOrder(enc.all, func(e kv) error { return set(p.batch, e.k, e.v) }); err != nil {
		p.batch.Close()
		return nil, fmt.Errorf("prepare %d messages in %s: %w", len(msgs), appKey, err)
	}
	return p, nil
}

// preparedFor returns step's preparedStep if it was made for msgs.
func preparedFor(step *store.BroadcastStep, msgs []store.BatchMessage) *preparedStep {
	if step == nil {
		return nil
	}
	p, ok := step.Prepared.(*preparedStep)
	if !ok || len(p.msgs) != len(msgs) || len(msgs) == 0 || &p.msgs[0] != &msgs[0] {
		return nil
	}
	return p
}

// count returns the device's prepared count if it still holds: the
// caller holds the device's stripe.
func (p *preparedStep) count(s *Store, appKey, name string) (int64, bool) {
	if p == nil {
		return 0, false
	}
	c, ok := p.counts[name]
	if !ok || s.pending.countGen(appKey, name) != c.gen {
		return 0, false
	}
	return c.count, true
}
