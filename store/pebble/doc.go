// Package pebble is devmsg's embedded store: store.Store on a Pebble
// database in the data directory.
//
// Every write is one batch committed with pebble.Sync. Read-check-write
// sequences (a version check, a seq_no check, the pending count) hold one
// of 1024 striped locks, chosen by app and device or by app and seq_no,
// until their commit is synced; writes to different devices overlap, so
// Pebble's group commit lets them share fsyncs. Expired seq_no entries
// count as absent at once and are deleted by a sweeper once a minute.
package pebble
