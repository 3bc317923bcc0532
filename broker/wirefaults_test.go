package broker

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// readToClose reads what the broker writes until it closes the
// connection, which it must within 5 s.
func (rc *rawClient) readToClose() []byte {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(rc.r)
	if err != nil {
		rc.t.Fatalf("the broker did not close the connection (%v); read % x", err, b)
	}
	return b
}

// TestOutsidePrefixClosesMQTT311 (mochi patch 11): an MQTT 3.1.1 device
// that publishes at QoS 1 outside its prefix has its connection closed
// with no DISCONNECT before the close (3.1.1 has none from the server);
// at QoS 0 the publish is dropped and the connection stays.
func TestOutsidePrefixClosesMQTT311(t *testing.T) {
	_, addr := startBroker(t, Config{}, &pubHandler{})
	outside := func(rc *rawClient, qos byte) {
		t.Helper()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, ProtocolVersion: rc.version,
			TopicName: "d/app/other/up", Payload: []byte("p")}
		if qos > 0 {
			pk.PacketID = 1
		}
		var buf bytes.Buffer
		if err := pk.PublishEncode(&buf); err != nil {
			t.Fatal(err)
		}
		rc.write(buf.Bytes())
	}

	rc, _ := rawConnect(t, addr, 4, "app/dev", "secret")
	outside(rc, 0)
	rc.ping()
	outside(rc, 1)
	if b := rc.readToClose(); len(b) != 0 {
		t.Errorf("3.1.1 device read % x before the close, want nothing", b)
	}
}
