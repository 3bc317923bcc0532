package events

import (
	"time"

	"github.com/devmsg/devmsg/store"
)

// Protocol names an MQTT protocol version as device.online has it.
func Protocol(version byte) string {
	if version >= 5 {
		return "5"
	}
	return "3.1.1"
}

// OfflineOf returns the device.offline of the connection that device d's
// presence entry names, ended for reason at now. online_ms counts from
// d.LastLoginTime, which the store keeps to the second; a caller that
// knows the login to the millisecond passes onlineMS >= 0, else -1.
func OfflineOf(d store.Device, reason string, now time.Time, onlineMS int64) store.Event {
	if onlineMS < 0 {
		onlineMS = max(0, now.UnixMilli()-d.LastLoginTime*1000)
	}
	return New(TypeOffline, d.AppKey, d.Name, now, Offline{ClientIP: d.ClientIP, Reason: reason, OnlineMS: onlineMS})
}

// NodeLost is the offline builder of store.ResetPresence: the
// device.offline, reason node_lost, of a device whose node died or
// restarted while it was connected.
func NodeLost(d store.Device) []store.Event {
	return []store.Event{OfflineOf(d, ReasonNodeLost, time.Now(), -1)}
}
