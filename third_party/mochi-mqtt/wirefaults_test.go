// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patches 11 to 13 of PATCHES.md, over TCP: an MQTT
// 3.1.1 client is never sent DISCONNECT; a PUBACK (PUBREC, PUBREL,
// PUBCOMP) with packet id 0 or a PINGREQ that is not empty closes the
// connection; so does a CONNECT with a property repeated or a Receive
// Maximum of 0.

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// denyHook lets every client in and refuses publishes to deny/...
type denyHook struct{ HookBase }

func (h *denyHook) ID() string { return "deny" }
func (h *denyHook) Provides(b byte) bool {
	return b == OnConnectAuthenticate || b == OnACLCheck
}
func (h *denyHook) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *denyHook) OnACLCheck(_ *Client, topic string, write bool) bool {
	return !write || !strings.HasPrefix(topic, "deny/")
}

func newWireServer(t *testing.T) string {
	t.Helper()
	s := New(&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, s.AddHook(new(denyHook), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, s.AddListener(listeners.NewNet("t", ln)))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String()
}

// dialWire connects with protocol version 4 (3.1.1) or 5 and reads the
// CONNACK, which must accept.
func dialWire(t *testing.T, addr string, version byte, id string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', version, 2, 0, 60}
	if version == 5 {
		vh = append(vh, 0) // no properties
	}
	body := append(append(vh, 0, byte(len(id))), id...)
	_, err = c.Write(append([]byte{0x10, byte(len(body))}, body...))
	require.NoError(t, err)
	connack := readWirePacket(t, c)
	require.Equal(t, byte(0x20), connack[0])
	require.Equal(t, byte(0), connack[3], "CONNACK reason")
	return c
}

// readWirePacket reads one packet (remaining length under 128), whole.
func readWirePacket(t *testing.T, c net.Conn) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	head := make([]byte, 2)
	_, err := io.ReadFull(c, head)
	require.NoError(t, err)
	rest := make([]byte, head[1])
	_, err = io.ReadFull(c, rest)
	require.NoError(t, err)
	return append(head, rest...)
}

// readToClose reads what the server sends until it closes the connection,
// which it must within 5 s.
func readToClose(t *testing.T, c net.Conn) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b, err := io.ReadAll(c)
	require.NoError(t, err, "the server did not close the connection; read % x", b)
	return b
}

// requireDisconnect checks that b is one MQTT 5 DISCONNECT with reason.
func requireDisconnect(t *testing.T, b []byte, reason packets.Code) {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 3, "read % x, want DISCONNECT %#x", b, reason.Code)
	require.Equal(t, byte(packets.Disconnect<<4), b[0], "read % x", b)
	require.Equal(t, int(b[1])+2, len(b), "read % x, want one DISCONNECT", b)
	require.Equal(t, reason.Code, b[2], "DISCONNECT reason")
}

// TestNoDisconnectToMQTT311 (patch 11): MQTT 3.1.1 has no DISCONNECT from
// the server; a 3.1.1 client that publishes where it may not, or is taken
// over, has its connection closed with nothing written. An MQTT 5 client
// taken over gets DISCONNECT 0x8E, and one refused a publish PUBACK 0x87.
func TestNoDisconnectToMQTT311(t *testing.T) {
	addr := newWireServer(t)
	publishDenied := []byte{0x32, 11, 0, 6, 'd', 'e', 'n', 'y', '/', 'x', 0, 1, 'p'}

	c := dialWire(t, addr, 4, "pub4")
	_, err := c.Write(publishDenied)
	require.NoError(t, err)
	require.Empty(t, readToClose(t, c), "3.1.1 publish refused")

	c = dialWire(t, addr, 4, "same4")
	dialWire(t, addr, 4, "same4")
	require.Empty(t, readToClose(t, c), "3.1.1 taken over")

	c = dialWire(t, addr, 5, "same5")
	dialWire(t, addr, 5, "same5")
	requireDisconnect(t, readToClose(t, c), packets.ErrSessionTakenOver)

	c = dialWire(t, addr, 5, "pub5")
	_, err = c.Write(append([]byte{0x32, 12}, append(publishDenied[2:12:12], 0, 'p')...)) // no properties
	require.NoError(t, err)
	puback := readWirePacket(t, c)
	require.Equal(t, []byte{0x40, 0, 1, packets.ErrNotAuthorized.Code}, append(puback[:1:1], puback[2:5]...), "PUBACK % x", puback)
}

// TestAckWithoutPacketIDOrLongPingClose (patch 12): a PUBACK, PUBREC,
// PUBREL or PUBCOMP with packet id 0 is a protocol error, a PINGREQ with a
// remaining length of 1 a malformed packet: the connection is closed, an
// MQTT 5 client told why (DISCONNECT 0x82, 0x81), a 3.1.1 one sent
// nothing. A PUBACK of an id not in flight, and an empty PINGREQ, are
// still taken.
func TestAckWithoutPacketIDOrLongPingClose(t *testing.T) {
	addr := newWireServer(t)
	faults := []struct {
		what   string
		packet []byte
		reason packets.Code
	}{
		{"PUBACK 0", []byte{0x40, 2, 0, 0}, packets.ErrProtocolViolationNoPacketID},
		{"PUBREC 0", []byte{0x50, 2, 0, 0}, packets.ErrProtocolViolationNoPacketID},
		{"PUBREL 0", []byte{0x62, 2, 0, 0}, packets.ErrProtocolViolationNoPacketID},
		{"PUBCOMP 0", []byte{0x70, 2, 0, 0}, packets.ErrProtocolViolationNoPacketID},
		{"PINGREQ of 1 byte", []byte{0xc0, 1, 0}, packets.ErrMalformedPacket},
	}
	for _, version := range []byte{4, 5} {
		for _, f := range faults {
			c := dialWire(t, addr, version, "faulty")
			_, err := c.Write(f.packet)
			require.NoError(t, err)
			got := readToClose(t, c)
			if version == 5 {
				requireDisconnect(t, got, f.reason)
			} else {
				require.Empty(t, got, "3.1.1 %s", f.what)
			}
		}

		c := dialWire(t, addr, version, "fine")
		_, err := c.Write([]byte{0x40, 2, 0, 7, 0xc0, 0})
		require.NoError(t, err)
		require.Equal(t, []byte{0xd0, 0}, readWirePacket(t, c), "PINGRESP after a PUBACK of id 7")
	}
}

// TestRepeatedPropertyOrReceiveMaximumZeroRefused (patch 13): a property
// other than a User Property included twice, and a Receive Maximum of 0,
// are protocol errors; a CONNECT with either closes the connection, where
// it was accepted with the last value read (or 0 read as none declared).
func TestRepeatedPropertyOrReceiveMaximumZeroRefused(t *testing.T) {
	addr := newWireServer(t)
	connect := func(id string, props ...byte) []byte {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		vh := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 60, byte(len(props))}, props...)
		body := append(append(vh, 0, byte(len(id))), id...)
		_, err = c.Write(append([]byte{0x10, byte(len(body))}, body...))
		require.NoError(t, err)
		return readToClose(t, c)
	}
	for _, tc := range []struct {
		name  string
		props []byte
	}{
		{"receive maximum 0", []byte{0x21, 0, 0}},
		{"receive maximum twice", []byte{0x21, 0, 5, 0x21, 0, 10}},
		{"session expiry twice", []byte{0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2}},
	} {
		// The connection is closed, as for any CONNECT that does not
		// decode (MQTT 5 section 4.13.1: a CONNACK first is allowed, not
		// required); before, it was accepted.
		got := connect("bad", tc.props...)
		if len(got) > 0 {
			require.Equal(t, byte(0x20), got[0], "%s: read % x, want nothing or a CONNACK", tc.name, got)
			require.Equal(t, packets.ErrProtocolViolation.Code, got[3], "%s: CONNACK % x", tc.name, got)
		}
	}
	// Still accepted: Receive Maximum 5 once, and a User Property twice.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	props := []byte{0x21, 0, 5, 0x26, 0, 1, 'k', 0, 1, 'v', 0x26, 0, 1, 'k', 0, 1, 'w'}
	vh := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 60, byte(len(props))}, props...)
	body := append(append(vh, 0, 2), "ok"...)
	_, err = c.Write(append([]byte{0x10, byte(len(body))}, body...))
	require.NoError(t, err)
	connack := readWirePacket(t, c)
	require.Equal(t, []byte{0x20, 0}, []byte{connack[0], connack[3]}, "CONNACK % x", connack)
}
