// Package mqttapi is the devices' face, the MQTT counterpart of restapi:
// it authenticates devices against the store, keeps their presence,
// routes what they publish to property sync and message delivery, and
// passes REST-side changes (a property set, a disabled device) to the
// devices that are connected.
package mqttapi
