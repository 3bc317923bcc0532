// SPDX-License-Identifier: MIT

package mqtt

// Tests of the devmsg patch 9 of PATCHES.md: the read deadline is moved
// about once a second, never earlier than the keepalive asks and at most
// a second later.

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

func TestReadDeadlineMovedSeldom(t *testing.T) {
	conn := &deadlineConn{Conn: newDiscardConn()}
	cl := allocClient(conn, nil)
	const keepalive = 10 // seconds: one and a half is 15 s
	start := time.Now()
	for i := 0; i < 100; i++ {
		cl.refreshDeadline(keepalive)
	}
	end := time.Now()
	require.Len(t, conn.set, 1, "100 packets read in a row move the deadline once")
	require.GreaterOrEqual(t, conn.set[0].Sub(start), 15*time.Second)
	require.LessOrEqual(t, conn.set[0].Sub(end), 16*time.Second, "at most a second late")

	// Once less than 15 s remain, the next packet moves it again, at
	// least 15 s on.
	cl.Net.readBy = time.Now().Add(15*time.Second - time.Millisecond)
	now := time.Now()
	cl.refreshDeadline(keepalive)
	require.Len(t, conn.set, 2)
	require.GreaterOrEqual(t, conn.set[1].Sub(now), 15*time.Second)
	require.LessOrEqual(t, conn.set[1].Sub(time.Now()), 16*time.Second, "at most a second late")

	// Keepalive 0: no deadline, set as before.
	cl.refreshDeadline(0)
	require.Len(t, conn.set, 3)
	require.True(t, conn.set[2].IsZero())
	cl.refreshDeadline(keepalive)
	require.Len(t, conn.set, 4)
	require.False(t, conn.set[3].IsZero())
}
