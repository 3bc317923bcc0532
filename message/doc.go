// Package message accepts messages for devices, keeps each message's state
// and builds its status records, as docs/api.md ("Message states and
// status records") describes them. It knows no transport: package
// delivery gets the messages onto device connections.
package message
