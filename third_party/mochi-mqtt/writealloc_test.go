// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patch 8 of PATCHES.md: writing a publish allocates
// nothing, and reading a burst of packets allocates no closure or channel.

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"
)

// discardConn is a connection whose writes all succeed at once.
type discardConn struct {
	net.Conn
	written bytes.Buffer
}

func newDiscardConn() *discardConn {
	c, _ := net.Pipe() // for its addresses; never written
	return &discardConn{Conn: c}
}

func (c *discardConn) Write(b []byte) (int, error)      { return c.written.Write(b) }
func (c *discardConn) SetWriteDeadline(time.Time) error { return nil }

func allocClient(conn net.Conn, hook Hook) *Client {
	hooks := new(Hooks)
	if hook != nil {
		if err := hooks.Add(hook, nil); err != nil {
			panic(err)
		}
	}
	cl := newClient(conn, &ops{
		info:    new(system.Info),
		hooks:   hooks,
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		options: &Options{Capabilities: NewDefaultServerCapabilities(), ClientNetWriteBufferSize: 2048, WriteTimeout: 10 * time.Second},
	})
	cl.Properties.ProtocolVersion = 4
	return cl
}

func testPublish() packets.Packet {
	return packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   "d/some-app-key/some-device-name/msg",
		PacketID:    7,
		Payload:     bytes.Repeat([]byte("x"), 180),
	}
}

func TestPublishEncodeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	pk := testPublish()
	buf := new(bytes.Buffer)
	buf.Grow(1024)
	for _, v := range []byte{4, 5} {
		pk.ProtocolVersion = v
		allocs := testing.AllocsPerRun(100, func() {
			buf.Reset()
			require.NoError(t, pk.PublishEncode(buf))
		})
		require.Zero(t, allocs, "MQTT version %d", v)
	}
}

func TestWritePacketAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	conn := newDiscardConn()
	cl := allocClient(conn, nil)
	pk := testPublish()
	require.NoError(t, cl.WritePacket(pk)) // the pools fill
	allocs := testing.AllocsPerRun(100, func() {
		conn.written.Reset()
		require.NoError(t, cl.WritePacket(pk))
	})
	require.Zero(t, allocs)
	// Written whole, as encoded.
	want := new(bytes.Buffer)
	pk.ProtocolVersion = 4
	require.NoError(t, pk.PublishEncode(want))
	require.Equal(t, want.Bytes(), conn.written.Bytes())

	// Held and written together, likewise.
	conn.written.Reset()
	require.NoError(t, cl.WritePackets([]packets.Packet{pk, pk, pk}))
	require.Equal(t, bytes.Repeat(want.Bytes(), 3), conn.written.Bytes())
}

// sentHook keeps the bytes of every packet sent.
type sentHook struct {
	HookBase
	sent [][]byte
}

func (h *sentHook) ID() string           { return "sent" }
func (h *sentHook) Provides(b byte) bool { return b == OnPacketSent }
func (h *sentHook) OnPacketSent(_ *Client, _ packets.Packet, b []byte) {
	h.sent = append(h.sent, b)
}

// A hook given a packet's bytes keeps them: they are not a pooled buffer
// that the next packet overwrites.
func TestPacketSentBytesStay(t *testing.T) {
	h := &sentHook{}
	cl := allocClient(newDiscardConn(), h)
	first, second := testPublish(), testPublish()
	second.Payload = bytes.Repeat([]byte("y"), 180)
	require.NoError(t, cl.WritePackets([]packets.Packet{first, second}))
	require.NoError(t, cl.WritePackets([]packets.Packet{second, first}))
	require.Len(t, h.sent, 4)
	require.Contains(t, string(h.sent[0]), "xxxx")
	require.Contains(t, string(h.sent[1]), "yyyy")
	require.Equal(t, h.sent[0], h.sent[3])
	require.Equal(t, h.sent[1], h.sent[2])
}

// Hooks.Add records what a hook provides: events no hook provides are
// skipped, those one provides are not.
func TestHooksProvidedRecorded(t *testing.T) {
	h := new(Hooks)
	require.False(t, h.anyProvides(OnPacketSent))
	require.NoError(t, h.Add(&sentHook{}, nil))
	require.True(t, h.anyProvides(OnPacketSent))
	require.False(t, h.anyProvides(OnPacketEncode))
	require.False(t, h.anyProvides(OnPacketRead))
}

// A burst of packets read costs the reader no closure, error or channel
// (runFresh with a pooled freshJob): a PINGREQ answered allocates only
// what reading and answering it needs.
func TestReadBurstAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := New(&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	r, w := net.Pipe()
	defer r.Close()
	cl := s.NewClient(w, "t", "c", false)
	cl.Properties.ProtocolVersion = 4
	cl.State.Keepalive = 0
	done := make(chan error, 1)
	go func() { done <- s.readWaiting(cl) }()
	ping := []byte{packets.Pingreq << 4, 0}
	resp := make([]byte, 2)
	roundTrip := func() {
		_, err := r.Write(ping)
		require.NoError(t, err)
		_, err = io.ReadFull(r, resp)
		require.NoError(t, err)
	}
	for i := 0; i < 10; i++ {
		roundTrip()
	}
	allocs := testing.AllocsPerRun(200, roundTrip)
	// Five allocations before: the hand-over's closures, error and
	// channel, and the PINGRESP's buffer. (A pool that a GC emptied may
	// allocate once.)
	require.LessOrEqual(t, allocs, 1.0)
	r.Close()
	<-done
}

// repeatReader returns b over and over.
type repeatReader struct{ b []byte }

func (r repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n+len(r.b) <= len(p) {
		n += copy(p[n:], r.b)
	}
	return n, nil
}

// A PUBACK read allocates its body once: decoding no longer copies it.
func TestReadPacketCopiesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cl := allocClient(newDiscardConn(), nil)
	puback := []byte{packets.Puback << 4, 2, 0, 7}
	cl.Net.bconn = bufio.NewReader(repeatReader{puback})
	fh := new(packets.FixedHeader)
	allocs := testing.AllocsPerRun(100, func() {
		require.NoError(t, cl.ReadFixedHeader(fh))
		pk, err := cl.ReadPacket(fh)
		require.NoError(t, err)
		require.Equal(t, uint16(7), pk.PacketID)
	})
	require.LessOrEqual(t, allocs, 1.0) // 2 before
}
