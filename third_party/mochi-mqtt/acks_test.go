// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patch 5 of PATCHES.md: the acks of a burst of
// packets go out in one write.

import (
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// slowPublishHook takes a while over each publish, as a hook that stores
// it durably would.
type slowPublishHook struct{ idleTestHook }

func (h *slowPublishHook) ID() string { return "slow-publish" }
func (h *slowPublishHook) Provides(b byte) bool {
	return h.idleTestHook.Provides(b) || b == OnPublish
}
func (h *slowPublishHook) OnPublish(_ *Client, pk packets.Packet) (packets.Packet, error) {
	time.Sleep(2 * time.Millisecond)
	return pk, nil
}

func TestAcksOfABurstInOneWrite(t *testing.T) {
	s := New(&Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, s.AddHook(new(slowPublishHook), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cln := &countingListener{Listener: ln}
	require.NoError(t, s.AddListener(listeners.NewNet("t", cln)))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })

	c := dialIdle(t, ln.Addr().String(), "burst") // CONNACK and SUBACK: 2 writes
	defer c.Close()
	require.Equal(t, int64(2), cln.writes.Load())

	// Five QoS 1 publishes to burst/y (no subscriber) in one segment, ids 1 to 5.
	var burst []byte
	for id := byte(1); id <= 5; id++ {
		burst = append(burst, 0x32, 13, 0, 7, 'b', 'u', 'r', 's', 't', '/', 'y', 0, id, 'h', 'i')
	}
	_, err = c.Write(burst)
	require.NoError(t, err)
	acks := make([]byte, 5*4)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, acks)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		require.Equal(t, []byte{0x40, 2, 0, byte(i + 1)}, acks[4*i:4*i+4], "PUBACK %d", i+1)
	}
	require.Equal(t, int64(3), cln.writes.Load(), "five PUBACKs in one write")

	// A single publish is acknowledged at once, on its own.
	_, err = c.Write([]byte{0x32, 13, 0, 7, 'b', 'u', 'r', 's', 't', '/', 'y', 0, 6, 'h', 'i'})
	require.NoError(t, err)
	_, err = io.ReadFull(c, acks[:4])
	require.NoError(t, err)
	require.Equal(t, []byte{0x40, 2, 0, 6}, acks[:4])
	require.Equal(t, int64(4), cln.writes.Load())

	// Acks held while the burst's last packet is a QoS 0 publish, which
	// writes nothing, still go out at the end of the burst.
	burst = append([]byte{0x32, 13, 0, 7, 'b', 'u', 'r', 's', 't', '/', 'y', 0, 7, 'h', 'i'},
		0x30, 11, 0, 7, 'b', 'u', 'r', 's', 't', '/', 'y', 'h', 'i')
	_, err = c.Write(burst)
	require.NoError(t, err)
	_, err = io.ReadFull(c, acks[:4])
	require.NoError(t, err)
	require.Equal(t, []byte{0x40, 2, 0, 7}, acks[:4])
}

// TestWritePacketsInOneWrite checks that WritePackets writes its packets,
// in order, with one write.
func TestWritePacketsInOneWrite(t *testing.T) {
	s := New(&Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, s.AddHook(new(idleTestHook), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cln := &countingListener{Listener: ln}
	require.NoError(t, s.AddListener(listeners.NewNet("t", cln)))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })

	c := dialIdle(t, ln.Addr().String(), "many") // CONNACK and SUBACK: 2 writes
	defer c.Close()
	// The counter moves once the server's write returns, which can be
	// after the client has read what it wrote.
	writes := func(n int64) func() bool { return func() bool { return cln.writes.Load() == n } }
	require.Eventually(t, writes(2), 5*time.Second, time.Millisecond)
	cl, ok := s.Clients.Get("many")
	require.True(t, ok)

	var pks []packets.Packet
	for _, p := range []string{"a", "b", "c"} {
		pks = append(pks, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName:   "many/x",
			Payload:     []byte(p),
			PacketID:    uint16(p[0]),
		})
	}
	require.NoError(t, cl.WritePackets(pks))
	// Each: 0x32, length 11, topic length 0 6, "many/x", packet id, payload.
	got := make([]byte, 3*13)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	for i, p := range []byte("abc") {
		require.Equal(t, []byte{0x32, 11, 0, 6, 'm', 'a', 'n', 'y', '/', 'x', 0, p, p}, got[13*i:13*i+13], "publish %d", i)
	}
	require.Eventually(t, writes(3), 5*time.Second, time.Millisecond, "three publishes in one write")
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, int64(3), cln.writes.Load(), "three publishes in one write")
}

// answeringHook answers each publish with a publish of its own, held
// (HoldPackets) so that it goes out with the PUBACK: a server that sends
// a device its next request as it takes the device's answer.
type answeringHook struct{ idleTestHook }

func (h *answeringHook) ID() string { return "answering" }
func (h *answeringHook) Provides(b byte) bool {
	return h.idleTestHook.Provides(b) || b == OnPublish
}
func (h *answeringHook) OnPublish(cl *Client, pk packets.Packet) (packets.Packet, error) {
	err := cl.HoldPackets([]packets.Packet{{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   "held/x",
		Payload:     []byte{pk.Payload[0]},
		PacketID:    uint16(pk.Payload[0]),
	}})
	return pk, err
}

// TestHoldPacketsGoWithTheAck checks that what a hook holds while a
// publish is processed goes out with the publish's PUBACK in one write;
// when no ack follows (QoS 0), at the end of the burst; and never later
// than the reader's wait for the rest of a packet.
func TestHoldPacketsGoWithTheAck(t *testing.T) {
	s := New(&Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, s.AddHook(new(answeringHook), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cln := &countingListener{Listener: ln}
	require.NoError(t, s.AddListener(listeners.NewNet("t", cln)))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })

	c := dialIdle(t, ln.Addr().String(), "held") // CONNACK and SUBACK: 2 writes
	defer c.Close()
	writes := func(n int64) func() bool { return func() bool { return cln.writes.Load() == n } }
	require.Eventually(t, writes(2), 5*time.Second, time.Millisecond)

	// A QoS 1 publish to held/y, packet id 1, payload "a": the held
	// publish (0x32, length 11, "held/x", id and payload "a") then the PUBACK.
	_, err = c.Write([]byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'y', 0, 1, 'a'})
	require.NoError(t, err)
	got := make([]byte, 13+4)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, []byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'x', 0, 'a', 'a'}, got[:13])
	require.Equal(t, []byte{0x40, 2, 0, 1}, got[13:])
	require.Eventually(t, writes(3), 5*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, int64(3), cln.writes.Load(), "the held publish and the PUBACK in one write")

	// A QoS 0 publish has no ack: what its hook held is written when the
	// burst ends.
	_, err = c.Write([]byte{0x30, 9, 0, 6, 'h', 'e', 'l', 'd', '/', 'y', 'b'})
	require.NoError(t, err)
	_, err = io.ReadFull(c, got[:13])
	require.NoError(t, err)
	require.Equal(t, []byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'x', 0, 'b', 'b'}, got[:13])

	// A publish followed by only the start of the next packet: what the
	// hook held, and the publish's PUBACK, go before the reader waits for
	// the rest (a slow link, a large packet in several segments).
	for _, next := range [][]byte{{0x32}, {0x32, 11, 0, 6, 'h', 'e'}} {
		_, err = c.Write(append([]byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'y', 0, 2, 'c'}, next...))
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err, "the held publish and the PUBACK wait for the next packet")
		require.Equal(t, []byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'x', 0, 'c', 'c'}, got[:13])
		require.Equal(t, []byte{0x40, 2, 0, 2}, got[13:])
		// The rest of the packet: a QoS 1 publish with id 3, payload "d".
		rest := []byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'y', 0, 3, 'd'}[len(next):]
		_, err = c.Write(rest)
		require.NoError(t, err)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, []byte{0x32, 11, 0, 6, 'h', 'e', 'l', 'd', '/', 'x', 0, 'd', 'd'}, got[:13])
		require.Equal(t, []byte{0x40, 2, 0, 3}, got[13:])
	}
}
