package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// puback acknowledges the publish with packet id id.
func (rc *rawClient) puback(id uint16) {
	rc.t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, ProtocolVersion: rc.version, PacketID: id}
	var buf bytes.Buffer
	if err := pk.PubackEncode(&buf); err != nil {
		rc.t.Fatal(err)
	}
	rc.write(buf.Bytes())
}

// connectWindowed starts a broker and connects an MQTT 5 device to it
// that declared a Receive Maximum of receiveMax and subscribed to its
// whole prefix; it returns the device and its session.
func connectWindowed(t *testing.T, receiveMax uint16) (*rawClient, *Session) {
	t.Helper()
	b, addr := startBroker(t, Config{}, &fakeHandler{})
	rc, code := rawConnectWith(t, addr, 5, "app/dev", "secret", 60, packets.Properties{ReceiveMaximum: receiveMax})
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	rc.subscribe("d/app/dev/#")
	var s *Session
	waitUntil(t, "the session", func() bool { s = b.Session("app", "dev"); return s != nil && s.Subscribed("msg") })
	return rc, s
}

// TestControlPublishWithinWindow: a control publish (a cancel, a desired
// document) to an MQTT 5 device that declared a Receive Maximum of 1
// waits while the window is full and goes at the next PUBACK, one at a
// time, ahead of the requests and messages that wait for the window;
// the device never has two publishes unacknowledged.
func TestControlPublishWithinWindow(t *testing.T) {
	rc, s := connectWindowed(t, 1)
	const limit = 1
	if _, sent, err := s.PublishRequestWithin(limit, false, "cmd", []byte("req1"), "cmd/reply", []byte("1")); !sent || err != nil {
		t.Fatalf("a request in an empty window: sent %v, %v", sent, err)
	}
	for _, p := range []string{"cancel1", "cancel2"} {
		if err := s.PublishControl("cmd/cancel", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, sent, _ := s.PublishRequestWithin(limit, false, "cmd", []byte("req2"), "cmd/reply", []byte("2")); sent {
		t.Fatal("a request went ahead of the control publishes waiting")
	}
	if ids, _ := s.PublishWithin(limit, "msg", [][]byte{[]byte("m1")}); len(ids) != 0 {
		t.Fatal("a message went ahead of the control publishes waiting")
	}
	req := rc.read(packets.Publish)
	rc.ping() // nothing else came: the window holds one
	rc.puback(req.PacketID)
	for _, want := range []string{"cancel1", "cancel2"} {
		pk := rc.read(packets.Publish)
		if string(pk.Payload) != want || pk.TopicName != "d/app/dev/cmd/cancel" || pk.FixedHeader.Qos != 1 {
			t.Fatalf("got %s %q at QoS %d, want %q on cmd/cancel", pk.TopicName, pk.Payload, pk.FixedHeader.Qos, want)
		}
		rc.ping()
		if _, sent, _ := s.PublishRequestWithin(limit, true, "cmd", []byte("req2"), "cmd/reply", []byte("2")); sent {
			t.Fatalf("the waiting request went with %s unacknowledged", want)
		}
		rc.puback(pk.PacketID)
	}
	waitUntil(t, "the window empty", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inWindow() == 0 })
	if _, sent, err := s.PublishRequestWithin(limit, true, "cmd", []byte("req2"), "cmd/reply", []byte("2")); !sent || err != nil {
		t.Fatalf("the waiting request after the last PUBACK: sent %v, %v", sent, err)
	}
	if pk := rc.read(packets.Publish); string(pk.Payload) != "req2" {
		t.Fatalf("got %q, want req2", pk.Payload)
	}
}

// TestControlPublishWithoutReceiveMaximum: to a device that declared no
// Receive Maximum (MQTT 3.1.1, or 5 without one) a control publish goes
// at once, whatever is unacknowledged.
func TestControlPublishWithoutReceiveMaximum(t *testing.T) {
	b, addr := startBroker(t, Config{}, &fakeHandler{})
	for _, version := range []byte{4, 5} {
		rc, _ := rawConnect(t, addr, version, "app/dev", "secret")
		rc.subscribe("d/app/dev/#")
		var s *Session
		waitUntil(t, "the session", func() bool {
			s = b.Session("app", "dev")
			return s != nil && s.ProtocolVersion == version && s.Subscribed("msg")
		})
		for i := range 3 {
			if _, err := s.PublishRequest("cmd", []byte("req"), "cmd/reply", nil); err != nil {
				t.Fatal(err)
			}
			if err := s.PublishControl("cmd/cancel", fmt.Appendf(nil, "c%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			rc.read(packets.Publish)
			if pk := rc.read(packets.Publish); string(pk.Payload) != fmt.Sprintf("c%d", i) {
				t.Fatalf("v%d: got %q, want c%d", version, pk.Payload, i)
			}
		}
		rc.c.Close()
		waitUntil(t, "the session gone", func() bool { return b.Session("app", "dev") == nil })
	}
}

// TestControlBacklogDisconnects: a device with a full window that lets
// controlMax control publishes pile up is disconnected.
func TestControlBacklogDisconnects(t *testing.T) {
	rc, s := connectWindowed(t, 1)
	if err := s.PublishControl("cmd/cancel", []byte("first")); err != nil {
		t.Fatal(err)
	}
	for range controlMax {
		if err := s.PublishControl("cmd/cancel", []byte("waits")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PublishControl("cmd/cancel", []byte("one too many")); !errors.Is(err, ErrControlBacklog) {
		t.Fatalf("over the backlog: %v, want ErrControlBacklog", err)
	}
	rc.read(packets.Publish)
	for {
		if _, err := rc.r.ReadByte(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Logf("read: %v", err)
			}
			break
		}
	}
	waitUntil(t, "the session gone", func() bool { return !s.Live() })
}

// TestControlCountsUncountedPublishes: a publish the service stopped
// counting (Uncount: a message that expired unacknowledged) still holds
// a place in the device's Receive Maximum, so a control publish waits.
func TestControlCountsUncountedPublishes(t *testing.T) {
	rc, s := connectWindowed(t, 1)
	id, err := s.PublishRequest("cmd", []byte("req"), "cmd/reply", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Uncount(id)
	if err := s.PublishControl("cmd/cancel", []byte("c")); err != nil {
		t.Fatal(err)
	}
	rc.read(packets.Publish)
	rc.ping() // the control publish did not come
	rc.puback(id)
	if pk := rc.read(packets.Publish); string(pk.Payload) != "c" {
		t.Fatalf("got %q, want the control publish", pk.Payload)
	}
}
