// Package storetest is the conformance suite every store.Store backend
// passes: RunTests(t, newStore) from the backend's own tests, and
// RunReopenTests(t, open) for backends whose data outlives the process.
// The suite tests the contract documented on store.Store, including the
// precedence of its errors (a used seq_no is reported before a version
// conflict or a full queue, so that a retry is replayed) and the outcome
// of concurrent writers.
//
// The package is over 2,000 lines, all of them in non-test files, because
// it is the conformance suite every backend runs: each backend's tests
// (store/memory, store/pebble, store/redis) import it, and no package can
// import another's _test.go files. It is split by concern: storetest.go
// (the test list, helpers, apps, messages and queues, meta), devices.go
// (devices and their listing), shadow.go (shadows, seq_no), concurrent.go
// (concurrent writers), reopen.go (what survives a reopen), messages.go
// (message transitions, outbox, callback queues, dead letters), events.go
// and eventcrash.go (the event log), fleet.go (tags, batch sends,
// broadcasts), updates.go (UpdateMessages), barrier.go (Barrier across a
// crash) and bench.go (benchmarks).
package storetest
