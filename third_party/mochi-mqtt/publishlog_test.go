// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patch 10 of PATCHES.md: a refused publish is logged
// without its payload, a reason code for the client at debug level; the
// keepalive's one and a half does not wrap.

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/packets"
)

func TestRefusedPublishLoggedWithoutPayload(t *testing.T) {
	payload := strings.Repeat("x", 200_000)
	for _, tc := range []struct {
		name  string
		err   error
		level string
	}{
		{"reason code", packets.ErrPayloadFormatInvalid, "level=DEBUG"},
		{"rejected", packets.ErrRejectPacket, "level=DEBUG"},
		{"hook failure", errTestHook, "level=ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			h := new(Hooks)
			h.Log = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
			require.NoError(t, h.Add(&modifiedHookBase{fail: true, err: tc.err}, nil))
			cl := &Client{ID: "dev-1"}
			pk := packets.Packet{TopicName: "d/app/dev-1/up/t", Payload: []byte(payload)}
			pk.FixedHeader.Qos = 1
			_, err := h.OnPublish(cl, pk)
			require.ErrorIs(t, err, tc.err)
			line := out.String()
			require.Contains(t, line, tc.level)
			require.Contains(t, line, "payload_bytes=200000")
			require.Contains(t, line, "topic=d/app/dev-1/up/t")
			require.Less(t, len(line), 1000, "the payload is not in the log line")
		})
	}
}

func TestReadDeadlineLongKeepalive(t *testing.T) {
	for _, keepalive := range []uint16{43690, 43691, 43692, 50000, 65535} {
		conn := &deadlineConn{Conn: newDiscardConn()}
		cl := allocClient(conn, nil)
		now := time.Now()
		cl.refreshDeadline(keepalive)
		require.Len(t, conn.set, 1)
		want := time.Duration(int(keepalive)*3/2) * time.Second
		require.GreaterOrEqual(t, conn.set[0].Sub(now), want, "keepalive %d", keepalive)
		// Packets go on arriving: the deadline stays where it is.
		cl.refreshDeadline(keepalive)
		require.Len(t, conn.set, 1, "keepalive %d", keepalive)
	}
}
