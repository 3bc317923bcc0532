// Package delivery gets messages onto device connections: it sends each
// device's pending messages over MQTT in send order, within the window
// of messages a device may have unacknowledged (its Receive Maximum),
// records a delivery on the device's PUBACK and an expiry at the
// message's TTL, and writes the payload a device receives on msg
// (docs/device-protocol.md, "Messages"). The store's pending queue is the
// only record; what delivery keeps is per connection.
package delivery
