package pebble

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// fillUpdates adds to b what an UpdateMessages call writes: the queue and
// expiry entries of the messages leaving their queues removed (see
// unqueue) and the messages with their outbox entries (kvs), in key
// order. (The devices' pending counts are not stored: see
// queuecount.go.) The memtable inserts a batch's keys in its order, each
// search starting from where the one before ended: a queue entry then an
// expiry entry, a message then its outbox entry, each PUBACK's device
// after another's, sent every insert across the skiplist from its top,
// and the ack write's memtable apply was 6% of the server's CPU in
// fan-out. In key order each insert searches on from the one before.
// Sorting a write's few hundred keys costs less than that.
//
// The keys removed are built in one buffer, and kvs, whose keys are
// distinct (each message once, each outbox entry under its own seq;
// updatePlan), is sorted by pdqsort, which is linear on the nearly sorted
// message keys of PUBACKs that come in send order: a stable sort and a
// key allocated each were a tenth of the ack write's CPU.
func fillUpdates(b *pebble.Batch, leaving []store.Message, kvs []kv) error {
	size := 0
	for i := range leaving {
		size += len(pQueue) + len(leaving[i].AppKey) + len(leaving[i].DeviceName) + 2 + 8 + len(pExpiry) + 16
	}
	buf := make([]byte, 0, size)
	dels := make([][]byte, 0, 2*len(leaving))
	for i := range leaving {
		var ks [2][]byte
		buf, ks = appendUnqueueKeys(buf, &leaving[i])
		dels = append(dels, ks[:]...)
	}
	slices.SortFunc(dels, bytes.Compare)
	sets := slices.Clone(kvs)
	slices.SortFunc(sets, func(x, y kv) int { return bytes.Compare(x.k, y.k) })
	// The removals and the sets are under prefixes of their own, so
	// each is one run of keys in order.
	for _, k := range dels { // SingleDeletes, as unqueue's
		if err := b.SingleDelete(k, nil); err != nil {
			return err
		}
	}
	for _, e := range sets {
		if err := set(b, e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}
