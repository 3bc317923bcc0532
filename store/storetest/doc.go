// Package storetest is the conformance suite every store.Store backend
// passes: RunTests(t, newStore) from the backend's own tests.
package storetest
