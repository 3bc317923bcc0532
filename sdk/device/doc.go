// Package device is the Go SDK for devices of a devmsg service. It speaks
// the MQTT protocol of docs/device-protocol.md through
// github.com/eclipse/paho.mqtt.golang: it connects as
// {app_key}/{device_name} with the device secret, subscribes to the
// device's service topics on every (re)connect, hands messages and
// desired properties to callbacks, and reports properties and clicks.
//
// A message is acknowledged (and so recorded as delivered) when its
// handler returns. Redelivery after a reconnect is possible, so handlers
// should ignore a msgid they have already processed.
package device
