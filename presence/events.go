package presence

import (
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// protocol names an MQTT protocol version as device.online has it.
func protocol(version byte) string {
	if version >= 5 {
		return "5"
	}
	return "3.1.1"
}

// offlineOf returns the device.offline of the connection that device d's
// presence entry names, ended for reason at now. online_ms counts from
// d.LastLoginTime, which the store keeps to the second; a caller that
// knows the login to the millisecond passes onlineMS >= 0, else -1.
func offlineOf(d store.Device, reason string, now time.Time, onlineMS int64) store.Event {
	if onlineMS < 0 {
		onlineMS = max(0, now.UnixMilli()-d.LastLoginTime*1000)
	}
	return events.New(events.TypeOffline, d.AppKey, d.Name, now, events.Offline{ClientIP: d.ClientIP, Reason: reason, OnlineMS: onlineMS})
}

// NodeLost is the offline builder of store.ResetPresence: the
// device.offline, reason node_lost, of a device whose node died or
// restarted while it was connected.
func NodeLost(d store.Device) []store.Event {
	return []store.Event{offlineOf(d, events.ReasonNodeLost, time.Now(), -1)}
}

// onlineEvents are the events of c's login at t over the presence entry
// prev: its device.online, after the device.offline (takeover) of the
// connection prev still names, if any. It remembers the login time for
// c's own offline.
func (t *Tracker) onlineEvents(prev store.Device, c Conn, at time.Time) []store.Event {
	var evs []store.Event
	if prev.Status == 1 {
		prev.AppKey, prev.Name = c.AppKey, c.Device
		evs = append(evs, offlineOf(prev, events.ReasonTakeover, at, t.onlineMS(prev.Conn, at)))
	}
	t.since.Store(c.ID, at.UnixMilli())
	return append(evs, events.New(events.TypeOnline, c.AppKey, c.Device, at, events.Online{
		ClientIP: c.ClientIP, Protocol: protocol(c.ProtocolVersion), Transport: c.Transport}))
}

// Offline is the device.offline of connection c, ended at at for reason
// (one of the events.Reason values).
func (t *Tracker) Offline(c Conn, reason string, at time.Time) store.Event {
	ms := at.Sub(c.Since).Milliseconds()
	if v, ok := t.since.Load(c.ID); ok {
		ms = at.UnixMilli() - v.(int64)
	}
	return events.New(events.TypeOffline, c.AppKey, c.Device, at, events.Offline{
		ClientIP: c.ClientIP, Reason: reason, OnlineMS: max(0, ms)})
}
