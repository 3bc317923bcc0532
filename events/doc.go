// Package events owns what devices say to the backend and what the
// service says about them (docs/events.md): the event types and their
// data, the one JSON shape every consumer sees, the rules of telemetry and
// event reports a device publishes, and the app's event log that pull and
// webhooks read. Package presence makes the device.online and
// device.offline events; package webhook signs and sends the webhooks'
// POSTs.
package events
