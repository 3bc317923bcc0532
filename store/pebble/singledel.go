package pebble

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// unqueue adds to b the removal of m's queue and expiry entries, m as
// stored while pending.
//
// Both are Pebble SingleDeletes: a SingleDelete and the one Set it
// deletes drop each other when they meet in a flush or compaction, where
// a Delete stays in every level down to the last, so a delivered
// message's two entries, written and removed within the same memtable,
// never reach the disk. Pebble requires that the key was Set at most once
// since it was last deleted, which holds: each entry is keyed by the
// msgid (queueKey, expiryKey), written only by the write that creates
// the message pending (CreateMessage, CreateMessages), and a msgid is
// never created twice: a node's generator starts past every stored msgid
// (message.NewIDs), and nothing becomes pending again (store.ApplyUpdate).
// DeleteDevice removes queue entries with a Delete, which is allowed
// before a SingleDelete of the same key (Pebble turns the pair into a
// Delete).
func unqueue(b *pebble.Batch, m store.Message) error {
	for _, k := range unqueueKeys(m) {
		if err := b.SingleDelete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// unqueueKeys returns the keys unqueue deletes.
func unqueueKeys(m store.Message) [2][]byte {
	return [2][]byte{queueKey(m.AppKey, m.DeviceName, m.ID), expiryKey(m.ExpireTime, m.ID)}
}

// appendUnqueueKeys appends unqueueKeys(*m) to buf, for a write that
// orders its keys itself (fillUpdates), and returns buf and the two keys
// (in buf, which their caller no longer changes).
func appendUnqueueKeys(buf []byte, m *store.Message) ([]byte, [2][]byte) {
	q := len(buf)
	buf = appendQueueKey(buf, m.AppKey, m.DeviceName, m.ID)
	x := len(buf)
	buf = appendExpiryKey(buf, m.ExpireTime, m.ID)
	return buf, [2][]byte{buf[q:x:x], buf[x:len(buf):len(buf)]}
}
