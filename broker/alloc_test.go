package broker

import (
	"bytes"
	"testing"
)

// TestPublishAllocatesNothing: a delivery to a device (Session.Publish)
// allocates nothing once its pools are warm: not its packet id's slice,
// nor mochi's encoding (patch 8 in third_party/mochi-mqtt/PATCHES.md). Fan-out publishes one
// message per write half the time.
func TestPublishAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	b, addr := startBroker(t, Config{}, &fakeHandler{})
	rawConnect(t, addr, 4, "app/dev", "secret")
	var s *Session
	waitUntil(t, "the session", func() bool { s = b.Session("app", "dev"); return s != nil })
	payload := bytes.Repeat([]byte("x"), 200)
	publish := func() {
		id, err := s.Publish("msg", payload, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.releasePacketID(id) // as its PUBACK would
	}
	publish()
	if allocs := testing.AllocsPerRun(100, publish); allocs > 0 {
		t.Errorf("Publish allocates %.1f times, want none", allocs)
	}
}
