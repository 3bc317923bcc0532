package pebble

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// fillUpdates adds to b what an UpdateMessages call writes: the queue and
// expiry entries of the messages leaving their queues removed (see
// unqueue), the devices' pending counts, and the messages with their
// outbox entries (kvs), each kind of key together. The memtable inserts
// a batch's keys in its order, each search starting from where the one
// before ended: a queue entry then an expiry entry, a message then its
// outbox entry, sent every insert across the skiplist, and the ack
// write's memtable apply was 6% of the server's CPU in fan-out. Outbox
// keys are in sequence order and messages nearly in msgid order, so
// together most inserts land next to the one before.
func fillUpdates(b *pebble.Batch, leaving []store.Message, counts map[[2]string]int64, kvs []kv) error {
	for _, m := range leaving {
		if err := b.SingleDelete(queueKey(m.AppKey, m.DeviceName, m.ID), nil); err != nil {
			return err
		}
	}
	for _, m := range leaving {
		if err := b.SingleDelete(expiryKey(m.ExpireTime, m.ID), nil); err != nil {
			return err
		}
	}
	sets := make([]kv, 0, len(counts)+len(kvs))
	for dk, n := range counts {
		sets = append(sets, kv{key(pCount, dk[0], dk[1]), be64(n)})
	}
	sets = append(sets, kvs...)
	for _, e := range inKeyOrder(sets) {
		if err := set(b, e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}
