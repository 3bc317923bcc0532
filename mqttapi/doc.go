// Package mqttapi is the devices' face, the MQTT counterpart of restapi:
// it authenticates devices against the store, turns the broker's sessions
// into presence changes (package presence), attaches connections to
// message delivery (package delivery), routes what devices publish to
// property sync and the event log, and passes REST-side changes (a
// property set, a disabled device) to the devices that are connected, on
// this node or, in cluster mode, through package cluster.
package mqttapi
