// Package fdbudget keeps the service inside its file-descriptor limit.
//
// Every connection a client opens costs the process a descriptor, and so
// does every file of the store, every Redis connection and every callback
// or webhook POST. A Budget knows the process's limit and keeps a reserve
// of it for the service's own use: the connections its Listeners accept
// are counted, a device connection (and a new long-poll, which asks Room)
// is refused while the count would eat into the reserve, and other
// connections (the REST API) while it would eat into half of it. A
// Listener also caps the connections open from one source address, and
// rides out a failing accept (out of descriptors despite all this, when
// something else took them) with a backoff instead of giving up.
// docs/operations.md, "Running out of things", sizes the limits.
package fdbudget
