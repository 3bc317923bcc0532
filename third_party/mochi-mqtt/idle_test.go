// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patches listed in PATCHES.md: what an idle connected
// client costs the server.

import (
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

type idleTestHook struct{ HookBase }

func (h *idleTestHook) ID() string { return "idle-test" }
func (h *idleTestHook) Provides(b byte) bool {
	return b == OnConnectAuthenticate || b == OnACLCheck
}
func (h *idleTestHook) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *idleTestHook) OnACLCheck(*Client, string, bool) bool              { return true }

func newIdleTestServer(t *testing.T) (*Server, string) {
	t.Helper()
	s := New(&Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, s.AddHook(new(idleTestHook), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, s.AddListener(listeners.NewNet("t", ln)))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })
	return s, ln.Addr().String()
}

// dialIdle connects an MQTT 3.1.1 client with id and subscribes it to
// id/x at QoS 0.
func dialIdle(t *testing.T, addr, id string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	connect := append([]byte{0x10, byte(12 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, byte(len(id))}, id...)
	_, err = c.Write(connect)
	require.NoError(t, err)
	connack := make([]byte, 4)
	_, err = io.ReadFull(c, connack)
	require.NoError(t, err)
	require.Equal(t, []byte{0x20, 2, 0, 0}, connack)
	subscribe := append([]byte{0x82, byte(7 + len(id)), 0, 1, 0, byte(len(id) + 2)}, id...)
	subscribe = append(subscribe, '/', 'x', 0)
	_, err = c.Write(subscribe)
	require.NoError(t, err)
	suback := make([]byte, 5)
	_, err = io.ReadFull(c, suback)
	require.NoError(t, err)
	require.Equal(t, []byte{0x90, 3, 0, 1, 0}, suback)
	return c
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 1.5 s (an earlier test's server may still be ending, and an
// idle burst goroutine of patch 2 exits after 1 s).
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for i, same := 0, 0; i < 1000 && same < 75; i++ {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// waitGoroutines waits for the number of goroutines to settle at want
// (the short-lived ones of a handshake or a write exit on their own) and
// returns the last count seen.
func waitGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); n != want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// An idle client holds one goroutine, whose stack stays at the 2 KiB a
// goroutine starts with: the handshake and packet processing run on
// short-lived goroutines, and a writer runs only while there is
// something to write. Unpatched: two goroutines per client, one with a
// stack of 4 KiB or more.
func TestIdleClientOneSmallGoroutine(t *testing.T) {
	s, addr := newIdleTestServer(t)
	const n = 500
	g0 := settledGoroutines()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialIdle(t, addr, "idle-"+strconv.Itoa(i))
	}
	// Within 2 of one per client: a goroutine of another test may still
	// end in between; unpatched it is two per client (500 more).
	require.InDelta(t, g0+n, waitGoroutines(g0+n), 2, "goroutines with %d idle clients", n)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perClient := float64(after.StackInuse-before.StackInuse) / n
	if !raceEnabled {
		// 2 KiB each, and some slack for stacks the runtime keeps cached
		// (the short-lived goroutines'); unpatched, a client holds two
		// goroutines of 2 KiB at the very least, the reader 4 to 16.
		require.Less(t, perClient, 3.5*1024, "stack bytes per idle client")
	}

	// A publish to one of them is written by a writer that then exits.
	require.NoError(t, s.Publish("idle-7/x", []byte("hi"), false, 0))
	got := make([]byte, 14) // PUBLISH, length, topic length, topic, payload
	_ = conns[7].SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadFull(conns[7], got)
	require.NoError(t, err)
	require.Equal(t, "idle-7/xhi", string(got[4:]))
	require.InDelta(t, g0+n, waitGoroutines(g0+n), 2, "goroutines after a write")

	for _, c := range conns {
		_ = c.Close()
	}
	require.InDelta(t, g0, waitGoroutines(g0), 2, "goroutines after every client left")
}

// The once-a-second expiry loops allocate nothing while no client has
// anything to expire. Unpatched, each copied the whole client map.
func TestHousekeepingAllocatesNothingWhenIdle(t *testing.T) {
	s, addr := newIdleTestServer(t)
	for i := 0; i < 50; i++ {
		c := dialIdle(t, addr, "hk-"+strconv.Itoa(i))
		t.Cleanup(func() { _ = c.Close() })
	}
	now := time.Now().Unix()
	require.Zero(t, testing.AllocsPerRun(10, func() {
		s.clearExpiredClients(now)
		s.clearExpiredInflights(now)
	}))
}
