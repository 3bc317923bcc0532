// Package gateway connects the broker's device sessions to the domain:
// it authenticates devices against the store, keeps their presence,
// routes what they publish to property sync and message delivery, and
// passes REST-side changes (a property set, a disabled device) to the
// devices that are connected.
package gateway
