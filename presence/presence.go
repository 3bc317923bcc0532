package presence

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// Conn is one connection of a device, as presence records it.
type Conn struct {
	AppKey, Device string
	// Node is the node_id of the node that holds the connection; ID
	// names the connection uniquely across nodes and restarts.
	Node int
	ID   string
	// ClientIP is the device's address without the port.
	ClientIP string
	// ProtocolVersion is the MQTT version of the connection: 4 (3.1.1)
	// or 5 (3 for MQTT 3.1).
	ProtocolVersion byte
	// Transport is the listener the device came through: "tcp", "tls"
	// or "ws".
	Transport string
	// Since is when the connection was accepted.
	Since time.Time
}

// The errors a rule returns from inside a store update (UpdateDevice) to
// leave the entry as it is.
var (
	// ErrUnchanged: the entry already says what the change would.
	ErrUnchanged = errors.New("no change")
	// ErrHeldElsewhere: another node holds the device now, so the
	// connection asking is stale. It is an ErrUnchanged.
	ErrHeldElsewhere = fmt.Errorf("%w: held by another node", ErrUnchanged)
	// ErrDisabled refuses a login: the device was disabled since it
	// authenticated.
	ErrDisabled = errors.New("device disabled")
)

// Tracker applies the presence rules for the connections of one process.
// It remembers when each of them logged in (Unix ms, by connection ID),
// for the online_ms of its device.offline; the zero Tracker is ready.
type Tracker struct {
	since sync.Map // connection ID → int64
}

// onlineMS is how long connection conn has been online at at, in ms, or
// -1 when it did not log in through this process.
func (t *Tracker) onlineMS(conn string, at time.Time) int64 {
	if v, ok := t.since.Load(conn); ok {
		return at.UnixMilli() - v.(int64)
	}
	return -1
}

// Forget drops what the Tracker remembers of connection conn, once it
// has ended.
func (t *Tracker) Forget(conn string) { t.since.Delete(conn) }

// Login records c as the device's connection at at on its presence entry
// d, with its device.online in d.Emit: preceded, when the entry still
// names another connection (here or on another node), by that
// connection's device.offline (takeover). That connection's own logout
// then finds the entry no longer its own and writes nothing. prev is the
// entry as it was. ErrDisabled when the device is not enabled;
// ErrUnchanged for a retried login whose write had landed.
func (t *Tracker) Login(d *store.Device, c Conn, at time.Time) (prev store.Device, err error) {
	if d.Flag != store.FlagEnabled {
		return prev, ErrDisabled
	}
	prev = *d
	if d.Status == 1 && d.Node == c.Node && d.Conn == c.ID {
		return prev, ErrUnchanged
	}
	now := at.Unix()
	d.Status, d.ClientIP, d.LastLoginTime, d.Node, d.Conn = 1, c.ClientIP, now, c.Node, c.ID
	if d.TimeActive == 0 {
		d.TimeActive = now
	}
	d.Emit = t.onlineEvents(prev, c, at)
	return prev, nil
}

// Logout marks the device offline at at (Unix seconds), with off (its
// Offline) in d.Emit, if connection conn of node still holds it. A
// connection taken over (its offline written by the login that took
// over) or marked offline already (node_lost, kicked) gets ErrUnchanged.
func Logout(d *store.Device, node int, conn string, at int64, off store.Event) error {
	if d.Status != 1 || d.Node != node || d.Conn != conn {
		return ErrUnchanged // taken over, or already offline
	}
	d.Status, d.LastLogoutTime = 0, at
	d.Emit = []store.Event{off}
	return nil
}

// Kicked marks the device offline at at, with its device.offline
// (kicked), if the connection held names, read before the device was
// kicked, still holds it; else ErrUnchanged: only that connection is
// marked offline, never a newer one (of a device enabled again
// meanwhile).
func (t *Tracker) Kicked(d *store.Device, held store.Device, appKey, device string, at time.Time) error {
	if d.Status != 1 || d.Node != held.Node || d.Conn != held.Conn {
		return ErrUnchanged
	}
	off := *d
	off.AppKey, off.Name = appKey, device
	d.Emit = []store.Event{offlineOf(off, events.ReasonKicked, at, t.onlineMS(d.Conn, at))}
	d.Status, d.LastLogoutTime = 0, at.Unix()
	return nil
}

// Reassert marks the device online again, held by c, after its node
// looked dead (and it was marked offline, node_lost): its device.online
// goes in d.Emit. ErrUnchanged when c holds it already;
// ErrHeldElsewhere when another node holds it, and c is stale.
func (t *Tracker) Reassert(d *store.Device, c Conn, at time.Time) error {
	if d.Status == 1 && d.Node == c.Node && d.Conn == c.ID {
		return ErrUnchanged
	}
	if d.Status == 1 && d.Node != c.Node {
		return ErrHeldElsewhere
	}
	prev := *d
	d.Status, d.Node, d.Conn = 1, c.Node, c.ID
	d.Emit = t.onlineEvents(prev, c, at)
	return nil
}
