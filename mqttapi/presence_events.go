package mqttapi

import (
	"time"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// loginEvents are the events of session s's login at t over the presence
// entry prev: its device.online, after the device.offline (takeover) of
// the connection prev still names, if any. It remembers the login time
// for s's own offline.
func (g *API) loginEvents(prev store.Device, s *broker.Session, t time.Time) []store.Event {
	var evs []store.Event
	if prev.Status == 1 {
		ms := int64(-1)
		if v, ok := g.since.Load(prev.Conn); ok {
			ms = t.UnixMilli() - v.(int64)
		}
		prev.AppKey, prev.Name = s.AppKey, s.DeviceName
		evs = append(evs, events.OfflineOf(prev, events.ReasonTakeover, t, ms))
	}
	g.since.Store(g.connID(s), t.UnixMilli())
	return append(evs, events.New(events.TypeOnline, s.AppKey, s.DeviceName, t, events.Online{
		ClientIP: s.RemoteIP, Protocol: events.Protocol(s.ProtocolVersion), Transport: s.Transport}))
}

// logoutEvent is the device.offline of session s, ended at t.
func (g *API) logoutEvent(s *broker.Session, t time.Time) store.Event {
	ms := t.Sub(s.Since).Milliseconds()
	if v, ok := g.since.Load(g.connID(s)); ok {
		ms = t.UnixMilli() - v.(int64)
	}
	return events.New(events.TypeOffline, s.AppKey, s.DeviceName, t, events.Offline{
		ClientIP: s.RemoteIP, Reason: offlineReason(s.End()), OnlineMS: max(0, ms)})
}

// offlineReason is the device.offline reason of a session's end. A
// shutdown is the node going away, as a crash would (node_lost).
func offlineReason(e broker.End) string {
	switch e {
	case broker.EndDisconnect:
		return events.ReasonDisconnect
	case broker.EndKeepalive:
		return events.ReasonKeepalive
	case broker.EndTakeover:
		return events.ReasonTakeover
	case broker.EndKicked:
		return events.ReasonKicked
	case broker.EndShutdown:
		return events.ReasonNodeLost
	}
	return events.ReasonError
}
