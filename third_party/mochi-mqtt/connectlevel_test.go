// SPDX-License-Identifier: MIT

package mqtt

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A CONNECT with a protocol name or level the server does not support is
// answered with MQTT 3.1.1's return code 0x01 (unacceptable protocol
// level) and closed [MQTT-3.1.2-2]. Upstream sent 0x82, which exists only
// in MQTT 5, to a client that had not asked for MQTT 5 (patch 15). An
// MQTT 5 CONNECT with a bad name still gets its MQTT 5 reason code.
func TestConnectBadProtocolNameOrLevel(t *testing.T) {
	addr := newWireServer(t)
	for _, tt := range []struct {
		name    string
		proto   string
		level   byte
		connack []byte
	}{
		{"3.1.1 with a bad name", "MQTX", 4, []byte{0x20, 2, 0, 0x01}},
		{"MQIsdp at level 4", "MQIsdp", 4, []byte{0x20, 2, 0, 0x01}},
		{"MQTT at level 3", "MQTT", 3, []byte{0x20, 2, 0, 0x01}},
		{"MQTT at level 6", "MQTT", 6, []byte{0x20, 2, 0, 0x01}},
		{"MQTT 5 with a bad name", "MQTX", 5, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			vh := append([]byte{0, byte(len(tt.proto))}, tt.proto...)
			vh = append(vh, tt.level, 2, 0, 60)
			if tt.level == 5 {
				vh = append(vh, 0) // no properties
			}
			body := append(vh, 0, 2, 'i', 'd')
			_, err = c.Write(append([]byte{0x10, byte(len(body))}, body...))
			require.NoError(t, err)
			connack := readWirePacket(t, c)
			if tt.connack != nil {
				require.Equal(t, tt.connack, connack)
			} else {
				require.Equal(t, byte(0x20), connack[0])
				require.Equal(t, byte(0x82), connack[3], "an MQTT 5 protocol error")
			}
			require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, err = c.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the connection is closed after the CONNACK")
		})
	}
}
