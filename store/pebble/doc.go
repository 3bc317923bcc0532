// Package pebble is devmsg's embedded store: store.Store on a Pebble
// database in the data directory.
//
// Every write is one batch committed with pebble.Sync. Read-check-write
// sequences (a version check, a seq_no check, the pending count) hold one
// of 1024 striped locks, chosen by app and device or by app and seq_no,
// until their commit is synced; writes to different devices overlap, so
// Pebble's group commit lets them share fsyncs. Expired seq_no entries
// count as absent at once and are deleted by a sweeper once a minute.
//
// The package is near 2,000 lines because it is the whole store.Store
// contract on one key-value engine, with its own key layout, locking and
// durability; splitting it into packages would only export those
// internals. Its files split it by concern, with the names store/redis
// uses: pebble.go (open, close, locks, reads and writes, Barrier),
// apps.go (apps, meta), devices.go (devices, presence), keys.go (the key
// layout), shadow.go (shadows
// and seq_no entries), events.go (the event log), messages.go
// (messages, queues, the outbox), fleetmsgs.go (CreateMessages),
// broadcasts.go (broadcasts and their targets),
// callbacks.go (delivery queues, dead letters), devicecache.go (the
// device and pending-count caches) and sweep.go (the seq_no sweeper,
// which Redis does not need).
package pebble
