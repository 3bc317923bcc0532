// Package broker runs the embedded MQTT broker (mochi-mqtt) that devices
// connect to. It knows MQTT and nothing of apps, messages or properties:
// it authenticates through, and reports every device event to, a Handler
// that its user supplies, confines each device to its own topics, keeps
// one live connection per device, and lets the handler publish to a
// device with packet ids it can correlate with the device's PUBACKs.
package broker
