package broker

import (
	"errors"
	"net"

	"github.com/mochi-mqtt/server/v2/packets"
)

// End says why a session ended (Session.End).
type End int32

// The ends of a session.
const (
	// EndError is anything else: the network connection broke or was
	// closed without DISCONNECT, a protocol error, a packet too large, a
	// write to the device that failed or timed out.
	EndError End = iota
	// EndDisconnect: the device sent DISCONNECT.
	EndDisconnect
	// EndKeepalive: the device sent nothing for 1.5 times its keepalive.
	EndKeepalive
	// EndTakeover: a newer connection of the device took over, here
	// (Broker) or elsewhere (Session.TakenOver).
	EndTakeover
	// EndKicked: Broker.Kick or Session.Close ended it. (mochi's own
	// "not authorized" stop, of a 3.1.1 publish outside the device's
	// prefix, is EndError.)
	EndKicked
	// EndShutdown: Broker.Close ended it.
	EndShutdown
)

func (e End) String() string {
	switch e {
	case EndDisconnect:
		return "disconnect"
	case EndKeepalive:
		return "keepalive"
	case EndTakeover:
		return "takeover"
	case EndKicked:
		return "kicked"
	case EndShutdown:
		return "shutdown"
	}
	return "error"
}

// endOf works out why mochi ended a connection, from the error its read
// loop returned (nil after a DISCONNECT or a stop from outside) and the
// cause the connection was first stopped with: mochi stops a connection
// once, and the first cause given sticks, so a takeover or kick that
// closes the connection is not mistaken for the read error it causes.
func endOf(readErr, cause error) End {
	var code packets.Code
	if errors.As(cause, &code) {
		switch code {
		case packets.CodeDisconnect, packets.CodeDisconnectWillMessage:
			return EndDisconnect
		case packets.ErrSessionTakenOver:
			return EndTakeover
		case packets.ErrNotAuthorized:
			return EndKicked
		case packets.ErrServerShuttingDown:
			return EndShutdown
		}
	}
	// mochi moves the read deadline to 1.5 keepalives after every packet:
	// a read that times out is the keepalive running out. (A write that
	// times out stops the connection with its own error first, and the
	// read then fails on a closed connection, not by a timeout.)
	var ne net.Error
	if errors.As(readErr, &ne) && ne.Timeout() {
		return EndKeepalive
	}
	return EndError
}

// End says why the session ended; it is set before Handler.Disconnected
// is called, and EndError until then.
func (s *Session) End() End { return End(s.end.Load()) }
