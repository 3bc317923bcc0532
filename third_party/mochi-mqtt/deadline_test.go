package mqtt

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// TestWriteTimeoutOutlivesReads: with Options.WriteTimeout, a write to a
// client that stopped reading fails within it, even while the client's
// packets keep refreshing its keepalive deadline (keepalive 0, which
// upstream's SetDeadline turned into no write deadline at all). devmsg
// patch 7.
func TestWriteTimeoutOutlivesReads(t *testing.T) {
	cl, _, _ := newTestClient() // nothing reads the other end of the pipe
	cl.ops.options.WriteTimeout = 100 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		done <- cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}})
	}()
	give := time.After(3 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			return
		case <-tick.C:
			cl.refreshDeadline(0) // what each packet read does
		case <-give:
			t.Fatal("the write is still blocked 3 s on, its timeout 100 ms")
		}
	}
}

// TestWriteDeadlineRenewed: a write sets the deadline only when the one
// set before has less than nine tenths of WriteTimeout left.
func TestWriteDeadlineRenewed(t *testing.T) {
	cl, r, _ := newTestClient()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	cl.ops.options.WriteTimeout = time.Hour
	require.NoError(t, cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}))
	first := cl.Net.writeBy
	require.WithinDuration(t, time.Now().Add(time.Hour), first, time.Minute)
	require.NoError(t, cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}))
	require.Equal(t, first, cl.Net.writeBy, "renewed with most of the hour left")
	cl.Net.writeBy = time.Now().Add(53 * time.Minute)
	require.NoError(t, cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}))
	require.WithinDuration(t, time.Now().Add(time.Hour), cl.Net.writeBy, time.Minute)
}
