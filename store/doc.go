// Package store defines devmsg's storage contract: the record types, the
// Store interface every backend implements, and the sentinel errors callers
// check with errors.Is. Backends live in subpackages (store/pebble,
// store/redis, and store/memory for tests) and are checked by the
// conformance suite in store/storetest.
package store
