// Package pebble is devmsg's embedded store: store.Store on a Pebble
// database in the data directory. Every write is one batch committed with
// fsync; concurrent requests share fsyncs through Pebble's group commit.
package pebble
