package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestDeliveredSurvivesShutdown: a device takes a command (PUBACK) and
// the server is stopped cleanly right after, as a deploy stops it. The
// PUBACK was read before the stop, so the delivered state must be
// stored before the store closes: after the restart the command is
// delivered, with its answer due within its timeout, and is not sent
// to the device again.
func TestDeliveredSurvivesShutdown(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data_dir", dir}
	f := newFleet(t, args...)
	secret := f.createDevice("cmd-stop")
	d := connectV5Device(t, f.s.mqtt["tcp"], "cmd-stop", secret, 0)
	d.subscribe("cmd")
	v := f.command(`{"seq_no":1,"device_name":"cmd-stop","name":"ping","ttl":600,"timeout":600,"wait":0}`)
	pk, topic := d.publish()
	if topic != "cmd" || string(pk.Properties.CorrelationData) != fmt.Sprint(v.CmdID) {
		t.Fatalf("got %q %s, want command %d", topic, pk.Payload, v.CmdID)
	}
	d.puback(pk.PacketID)
	// A PINGRESP comes once the server has read what came before it:
	// the PUBACK has been taken.
	d.write([]byte{0xC0, 0x00})
	if resp, ok := d.read(10 * time.Second); !ok || resp.FixedHeader.Type != packets.Pingresp {
		t.Fatalf("PINGRESP: %+v", resp.FixedHeader)
	}
	f.s.stop(t)

	f = newFleet(t, args...)
	if got := f.getCommand(v.CmdID, 0); got.State != "delivered" || got.TimeDelivered == 0 {
		t.Fatalf("the device took command %d before a clean stop; after the restart: %+v", v.CmdID, got)
	}
	d = connectV5Device(t, f.s.mqtt["tcp"], "cmd-stop", secret, 0)
	d.subscribe("cmd")
	if pk, ok := d.read(time.Second); ok {
		t.Fatalf("after the restart the device got %q %s again", pk.TopicName, pk.Payload)
	}
}
