// Package presence holds whether a device is connected, and where: the
// presence entry of a device (store.Device Status, ClientIP,
// LastLoginTime, LastLogoutTime, TimeActive, and Node and Conn, which
// name the node and connection that hold it), how a login, a logout, a
// kick and a node's return change it, and the device.online and
// device.offline events each change writes with it, in the same atomic
// write. Every online is followed by exactly one offline of the same
// connection, and a live connection never has one: a takeover writes the
// old connection's offline (takeover) before the new one's online, and
// the old connection's own logout then finds the entry no longer its own
// and writes nothing. NodeLost is the offline of a device whose node
// died. docs/device-protocol.md ("Presence") and docs/events.md
// ("device.online", "device.offline") describe what devices and apps see.
//
// mqttapi calls it from the broker's session events, under a per-device
// lock, and retries a write the store refused; the event types and the
// data of their JSON are package events'.
package presence
