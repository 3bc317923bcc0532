// Package storetest is the conformance suite every store.Store backend
// passes: RunTests(t, newStore) from the backend's own tests, and
// RunReopenTests(t, open) for backends whose data outlives the process.
// The suite tests the contract documented on store.Store, including the
// precedence of its errors (a used seq_no is reported before a version
// conflict or a full queue, so that a retry is replayed) and the outcome
// of concurrent writers.
package storetest
