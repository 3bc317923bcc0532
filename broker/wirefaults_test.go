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

// TestAckWithoutPacketIDOrLongPingClose (mochi patch 12): a PUBACK with
// packet id 0, or a PINGREQ with remaining length 1, closes the device's
// connection: MQTT 5 after DISCONNECT 0x82 or 0x81, MQTT 3.1.1 with
// nothing written.
func TestAckWithoutPacketIDOrLongPingClose(t *testing.T) {
	_, addr := startBroker(t, Config{}, &pubHandler{})
	for _, version := range []byte{4, 5} {
		for _, f := range []struct {
			what   string
			packet []byte
			reason byte
		}{
			{"PUBACK 0", []byte{packets.Puback << 4, 2, 0, 0}, packets.ErrProtocolViolationNoPacketID.Code},
			{"PINGREQ of 1 byte", []byte{packets.Pingreq << 4, 1, 0}, packets.ErrMalformedPacket.Code},
		} {
			rc, _ := rawConnect(t, addr, version, "app/dev", "secret")
			rc.write(f.packet)
			if version == 4 {
				if b := rc.readToClose(); len(b) != 0 {
					t.Errorf("3.1.1 %s: read % x before the close, want nothing", f.what, b)
				}
				continue
			}
			if d := rc.read(packets.Disconnect); d.ReasonCode != f.reason {
				t.Errorf("MQTT 5 %s: DISCONNECT %#x, want %#x", f.what, d.ReasonCode, f.reason)
			}
			if b := rc.readToClose(); len(b) != 0 {
				t.Errorf("MQTT 5 %s: read % x after the DISCONNECT", f.what, b)
			}
		}
	}
}

// TestTopicAliasRefused: the CONNACK announces no Topic Alias Maximum, so
// a device may send no topic alias [MQTT-3.2.2-17]; a PUBLISH with one
// gets DISCONNECT 0x94 (topic alias invalid) and the close. It was taken.
func TestTopicAliasRefused(t *testing.T) {
	_, addr := startBroker(t, Config{}, &pubHandler{})
	rc, _ := rawConnect(t, addr, 5, "app/dev", "secret")
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 5, PacketID: 1,
		TopicName: "d/app/dev/up", Payload: []byte("p"), Properties: packets.Properties{TopicAlias: 1, TopicAliasFlag: true}}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	rc.write(buf.Bytes())
	if d := rc.read(packets.Disconnect); d.ReasonCode != packets.ErrTopicAliasInvalid.Code {
		t.Errorf("DISCONNECT %#x, want %#x", d.ReasonCode, packets.ErrTopicAliasInvalid.Code)
	}
	if b := rc.readToClose(); len(b) != 0 {
		t.Errorf("read % x after the DISCONNECT", b)
	}
}
