package broker

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestPublishWithinWindow: an MQTT 5 device that declared a Receive
// Maximum of 2 is never sent a third publish unacknowledged, whether it
// is a message (PublishWithin) or a request (PublishRequestWithin); a
// request that found the window full takes the place the next PUBACK
// frees, and no message goes while it waits; a packet given up with
// Uncount frees its place at once.
func TestPublishWithinWindow(t *testing.T) {
	rc, s := connectWindowed(t, 2)
	const limit = 2
	ids, err := s.PublishWithin(limit, "msg", [][]byte{[]byte("m1"), []byte("m2"), []byte("m3")})
	if err != nil || len(ids) != 2 {
		t.Fatalf("3 messages in a window of 2: sent %v, %v", ids, err)
	}
	if _, sent, err := s.PublishRequestWithin(limit, false, "msg", []byte("req"), "msg/reply", []byte("7")); sent || err != nil {
		t.Fatalf("a request with the window full: sent %v, %v", sent, err)
	}
	first := rc.read(packets.Publish)
	rc.read(packets.Publish)
	rc.puback(first.PacketID)
	waitUntil(t, "the PUBACK", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.awaiting) == 1 })
	if ids, _ := s.PublishWithin(limit, "msg", [][]byte{[]byte("m3")}); len(ids) != 0 {
		t.Fatal("a message took the place a waiting request is owed")
	}
	reqID, sent, err := s.PublishRequestWithin(limit, true, "msg", []byte("req"), "msg/reply", []byte("7"))
	if !sent || err != nil {
		t.Fatalf("the waiting request with a place free: sent %v, %v", sent, err)
	}
	if ids, _ := s.PublishWithin(limit, "msg", [][]byte{[]byte("m3")}); len(ids) != 0 {
		t.Fatal("a third publish unacknowledged under Receive Maximum 2")
	}
	s.Uncount(reqID)
	if ids, _ := s.PublishWithin(limit, "msg", [][]byte{[]byte("m3")}); len(ids) != 1 {
		t.Fatal("no place after Uncount")
	}
	if req := rc.read(packets.Publish); string(req.Payload) != "req" || string(req.Properties.CorrelationData) != "7" {
		t.Fatalf("third publish %q, want the request", req.Payload)
	}
	if m := rc.read(packets.Publish); string(m.Payload) != "m3" {
		t.Fatalf("fourth publish %q, want m3", m.Payload)
	}
}
