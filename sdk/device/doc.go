// Package device is the Go SDK for devices of a devmsg service. It speaks
// the MQTT protocol of docs/device-protocol.md, over MQTT 3.1.1 through
// github.com/eclipse/paho.mqtt.golang or over MQTT 5 through
// github.com/eclipse/paho.golang (Config.ProtocolVersion): it connects as
// {app_key}/{device_name} with the device secret, subscribes to the
// device's service topics on every (re)connect, hands messages and
// desired properties to callbacks, and reports properties and clicks.
//
// A message is acknowledged (and so recorded as delivered) when its
// handler returns. Redelivery after a reconnect is possible, so handlers
// should ignore a msgid they have already processed.
//
// The other way, a device tells the backend what it measures with
// PublishUp (telemetry on its "up" topics) and what happens to it with
// ReportEvent (name, content and level, as the device SDKs of the source
// API that devmsg is modelled on report events; see docs/api.md). Both
// reach the app's event log, which the backend pulls or receives by
// webhook (docs/events.md). At QoS 1 they return
// once the service has stored the event durably; an event sent again
// after a lost PUBACK may reach the backend twice (at least once).
//
// The backend can also ask the device to do something and wait for its
// answer: a command. Config.OnCommand registers a handler per command
// name; the handler returns an Answer (code 0 for success, a result, a
// message) and may report progress on the way. The SDK acknowledges the
// command at once, runs each command ID's handler once (a command sent
// again after a reconnect is answered from the stored answer), ends the
// handler's context when the backend cancels the command, and over MQTT 5
// answers to the Response Topic with the Correlation Data the service
// gave.
package device
