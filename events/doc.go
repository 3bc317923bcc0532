// Package events owns what devices say to the backend and what the
// service says about them (DESIGN.md section 7): the event types and their
// data, the one JSON shape every consumer sees, the rules of telemetry and
// event reports a device publishes, and the app's event log that pull and
// webhooks read.
package events
