package mqttapi

import (
	"time"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/presence"
	"github.com/devmsg/devmsg/store"
)

// conn is session s as the presence rules (package presence) see it.
func (g *API) conn(s *broker.Session) presence.Conn {
	return presence.Conn{AppKey: s.AppKey, Device: s.DeviceName, Node: g.node, ID: g.connID(s),
		ClientIP: s.RemoteIP, ProtocolVersion: s.ProtocolVersion, Transport: s.Transport, Since: s.Since}
}

// logoutEvent is the device.offline of session s, ended at t.
func (g *API) logoutEvent(s *broker.Session, t time.Time) store.Event {
	return g.presence.Offline(g.conn(s), offlineReason(s.End()), t)
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
