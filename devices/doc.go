// Package devices owns an app's devices as the API manages them: the rules
// of their names and marks, creating them with their secrets, changing
// their flag and mark, and deleting them in the order that leaves no
// message pending for a device that is gone. Presence and the MQTT side
// belong to mqttapi; properties to shadow.
package devices
