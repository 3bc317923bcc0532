package broker

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestStalledDeviceLosesConnection: a device that stops reading, while it
// keeps publishing with keepalive 0, loses its connection once a write to
// it has been blocked for Config.WriteTimeout, over TCP and over
// WebSocket; the delivery that was blocked returns an error. Over
// WebSocket the write waited forever before: gorilla set the connection's
// write deadline to its own (none) before every frame. Over TCP a packet
// read between the deadline's setting and the write cleared it (mochi's
// SetDeadline of the keepalive, none at keepalive 0): a race this test
// does not force, and mochi's TestWriteTimeoutOutlivesReads does.
func TestStalledDeviceLosesConnection(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			cfg := Config{TCPAddr: "127.0.0.1:0", WSAddr: "127.0.0.1:0", WriteTimeout: 200 * time.Millisecond,
				ServiceTopics: []string{"msg"}}
			b := New(cfg, &fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			addrs, err := b.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })

			send := stalledDevice(t, transport, addrs[transport])
			waitUntil(t, "the session", func() bool { return b.Session("app", "dev") != nil })
			s := b.Session("app", "dev")

			// The device keeps talking and never reads.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				var up bytes.Buffer
				pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, ProtocolVersion: 4,
					TopicName: "d/app/dev/up", Payload: []byte("reading")}
				_ = pk.PublishEncode(&up)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						if send(up.Bytes()) != nil {
							return
						}
					}
				}
			}()

			failed := make(chan error, 1)
			go func() {
				payload := bytes.Repeat([]byte("x"), 64<<10)
				for {
					if _, err := s.Publish("msg", payload, 0); err != nil {
						failed <- err
						return
					}
				}
			}()
			select {
			case err := <-failed:
				t.Logf("the blocked delivery failed: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("a delivery to a device that stopped reading is still blocked after 5 s (write timeout 200 ms)")
			}
			waitUntil(t, "the session ended", func() bool { return !s.Live() })
		})
	}
}

// stalledDevice connects app/dev with keepalive 0 over transport, reads
// the CONNACK, and returns a function that sends bytes; nothing reads
// the connection after the CONNACK.
func stalledDevice(t *testing.T, transport, addr string) func([]byte) error {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4}
	pk.Connect = packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 0, ClientIdentifier: "stalled",
		UsernameFlag: true, Username: []byte("app/dev"), PasswordFlag: true, Password: []byte("secret")}
	var connect bytes.Buffer
	if err := pk.ConnectEncode(&connect); err != nil {
		t.Fatal(err)
	}
	if transport == "tcp" {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(connect.Bytes()); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		ack := make([]byte, 4)
		if _, err := io.ReadFull(c, ack); err != nil || ack[0] != packets.Connack<<4 || ack[3] != 0 {
			t.Fatalf("CONNACK %x, %v", ack, err)
		}
		return func(b []byte) error { _, err := c.Write(b); return err }
	}
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws://"+addr+WebSocketPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WriteMessage(websocket.BinaryMessage, connect.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, ack, err := c.ReadMessage()
	if err != nil || len(ack) != 4 || ack[0] != packets.Connack<<4 || ack[3] != 0 {
		t.Fatalf("CONNACK %x, %v", ack, err)
	}
	return func(b []byte) error { return c.WriteMessage(websocket.BinaryMessage, b) }
}
