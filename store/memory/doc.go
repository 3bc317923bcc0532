// Package memory is store.Store held in maps in memory, for tests of the
// domain packages: it passes the same conformance suite as the Pebble and
// Redis backends (store/storetest) and needs no disk, server or cleanup.
//
// One mutex guards every map, and each method holds it from its first
// read to its last write, so every call is atomic with respect to every
// other; a callback passed to an Update method runs under it and must not
// call the store. Values are deep-copied on the way in and out (through
// JSON, as the other backends store them), so a caller never shares
// memory with the store. Nothing outlives the process: "durable" means
// "applied", so Barrier returns at once. It is not wired into devmsg serve.
package memory
