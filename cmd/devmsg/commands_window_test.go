package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
)

// v5Device is an MQTT 5 device over a bare TCP connection: it declares
// its Receive Maximum and acknowledges exactly what the test says, so
// the test sees every PUBLISH the service sends and when.
type v5Device struct {
	t      *testing.T
	c      net.Conn
	r      *bufio.Reader
	prefix string
	nextID uint16
}

func connectV5Device(t *testing.T, addr, name, secret string, receiveMax uint16) *v5Device {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := &v5Device{t: t, c: c, r: bufio.NewReader(c), prefix: "d/" + demoKey + "/" + name + "/"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Properties: packets.Properties{ReceiveMaximum: receiveMax}}
	user := demoKey + "/" + name
	pk.Connect = packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: user,
		UsernameFlag: true, Username: []byte(user), PasswordFlag: true, Password: []byte(secret)}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	d.write(buf.Bytes())
	if ack, ok := d.read(10 * time.Second); !ok || ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK: %+v", ack)
	}
	return d
}

func (d *v5Device) write(b []byte) {
	d.t.Helper()
	if _, err := d.c.Write(b); err != nil {
		d.t.Fatal(err)
	}
}

// read reads one packet within wait; ok false when none came.
func (d *v5Device) read(wait time.Duration) (packets.Packet, bool) {
	d.t.Helper()
	_ = d.c.SetReadDeadline(time.Now().Add(wait))
	hb, err := d.r.ReadByte()
	if ne, isNet := err.(net.Error); isNet && ne.Timeout() {
		return packets.Packet{}, false
	}
	if err != nil {
		d.t.Fatalf("read: %v", err)
	}
	_ = d.c.SetReadDeadline(time.Now().Add(10 * time.Second)) // the rest of the packet
	pk := packets.Packet{ProtocolVersion: 5}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		d.t.Fatal(err)
	}
	n, _, err := packets.DecodeLength(d.r)
	if err != nil {
		d.t.Fatal(err)
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(d.r, body); err != nil {
		d.t.Fatal(err)
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return pk, true
}

func (d *v5Device) subscribe(topics ...string) {
	d.t.Helper()
	d.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5, PacketID: d.nextID}
	for _, topic := range topics {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: d.prefix + topic, Qos: 1})
	}
	var buf bytes.Buffer
	if err := pk.SubscribeEncode(&buf); err != nil {
		d.t.Fatal(err)
	}
	d.write(buf.Bytes())
	if ack, ok := d.read(10 * time.Second); !ok || ack.FixedHeader.Type != packets.Suback {
		d.t.Fatalf("SUBACK: %+v", ack)
	}
}

// publish reads the next packet, which must be a QoS 1 PUBLISH, and
// returns it with its topic relative to the device's prefix.
func (d *v5Device) publish() (packets.Packet, string) {
	d.t.Helper()
	pk, ok := d.read(10 * time.Second)
	if !ok || pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos != 1 {
		d.t.Fatalf("want a QoS 1 PUBLISH, got %+v (read: %v)", pk.FixedHeader, ok)
	}
	return pk, strings.TrimPrefix(pk.TopicName, d.prefix)
}

func (d *v5Device) puback(id uint16) {
	d.t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, ProtocolVersion: 5, PacketID: id}
	var buf bytes.Buffer
	if err := pk.PubackEncode(&buf); err != nil {
		d.t.Fatal(err)
	}
	d.write(buf.Bytes())
}

// TestCommandWithinReceiveMaximum: an MQTT 5 device that declared a
// Receive Maximum of 2 and holds 2 messages unacknowledged is sent no
// command until it acknowledges one (MQTT 5 forbids more unacknowledged
// QoS 1 publishes than it declared); the place that frees goes to the
// command, ahead of the messages queued behind, and the place the
// command's PUBACK frees goes back to the messages.
func TestCommandWithinReceiveMaximum(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-rm")
	d := connectV5Device(t, f.s.mqtt["tcp"], "cmd-rm", secret, 2)
	d.subscribe("msg", "cmd")
	for i := range 5 {
		f.send("cmd-rm", fmt.Sprint("m", i), 3600)
	}
	var msgIDs []uint16
	for range 2 {
		pk, topic := d.publish()
		if topic != "msg" {
			t.Fatalf("got %q, want msg", topic)
		}
		msgIDs = append(msgIDs, pk.PacketID)
	}
	v := f.command(`{"seq_no":9001,"device_name":"cmd-rm","name":"ping","ttl":60,"wait":0}`)
	if pk, ok := d.read(time.Second); ok {
		t.Fatalf("a third PUBLISH unacknowledged under Receive Maximum 2: %s %s", pk.TopicName, pk.Payload)
	}
	if got := f.getCommand(v.CmdID, 0); got.State != "queued" {
		t.Fatalf("the command with the window full: %+v, want queued", got)
	}
	d.puback(msgIDs[0])
	cmd, topic := d.publish()
	if topic != "cmd" || string(cmd.Properties.CorrelationData) != fmt.Sprint(v.CmdID) {
		t.Fatalf("after a PUBACK got %q %s, want the command %d ahead of the queued messages", topic, cmd.Payload, v.CmdID)
	}
	if pk, ok := d.read(500 * time.Millisecond); ok {
		t.Fatalf("a third PUBLISH unacknowledged under Receive Maximum 2: %s %s", pk.TopicName, pk.Payload)
	}
	d.puback(cmd.PacketID)
	pk, topic := d.publish()
	if topic != "msg" || !strings.Contains(string(pk.Payload), "m2") {
		t.Fatalf("after the command's PUBACK got %q %s, want message m2", topic, pk.Payload)
	}
	d.puback(msgIDs[1])
	d.puback(pk.PacketID)
	for _, want := range []string{"m3", "m4"} {
		pk, topic := d.publish()
		if topic != "msg" || !strings.Contains(string(pk.Payload), want) {
			t.Fatalf("got %q %s, want message %s", topic, pk.Payload, want)
		}
		d.puback(pk.PacketID)
	}
	// The delivered state is stored a moment after the PUBACK
	// (docs/api.md, "States").
	waitFor(t, 5*time.Second, "the command delivered after its PUBACK", func() bool {
		return f.getCommand(v.CmdID, 0).State == "delivered"
	})
}

// TestCommandTakesPlaceFreedByExpiry: on a device that declared no
// Receive Maximum, messages that expire unacknowledged give up their
// places at once; a command waiting for a place takes the first of them,
// ahead of the messages queued behind, with no PUBACK to wake it.
func TestCommandTakesPlaceFreedByExpiry(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-exp")
	prefix := "d/" + demoKey + "/cmd-exp/"
	var mu sync.Mutex
	var topics []string
	opts := paho.NewClientOptions().AddBroker("tcp://" + f.s.mqtt["tcp"]).SetClientID(demoKey + "/cmd-exp").
		SetUsername(demoKey + "/cmd-exp").SetPassword(secret).SetCleanSession(true).SetAutoReconnect(false).
		SetAutoAckDisabled(true).SetOrderMatters(true)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(0)
	record := func(_ paho.Client, m paho.Message) { // never acknowledged
		mu.Lock()
		topics = append(topics, strings.TrimPrefix(m.Topic(), prefix))
		mu.Unlock()
	}
	for _, topic := range []string{"msg", "cmd"} {
		if tok := c.Subscribe(prefix+topic, 1, record); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	got := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(topics) }
	for i := range 64 {
		f.send("cmd-exp", fmt.Sprint("short", i), 2)
	}
	for i := range 5 {
		f.send("cmd-exp", fmt.Sprint("long", i), 3600)
	}
	waitFor(t, 10*time.Second, "the window to fill", func() bool { return len(got()) >= 64 })
	v := f.command(`{"seq_no":9001,"device_name":"cmd-exp","name":"ping","ttl":60,"wait":0}`)
	if s := f.getCommand(v.CmdID, 0).State; s != "queued" || len(got()) != 64 {
		t.Fatalf("with the window full: command %s, %d publishes, want queued and 64", s, len(got()))
	}
	waitFor(t, 15*time.Second, "the expired places to be taken", func() bool { return len(got()) >= 70 })
	if seq := got(); seq[64] != "cmd" || slices.Contains(seq[65:], "cmd") {
		t.Fatalf("after the expiry the device got %v, want the command first", seq[64:])
	}
}

func (d *v5Device) unsubscribe(topics ...string) {
	d.t.Helper()
	d.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, ProtocolVersion: 5, PacketID: d.nextID}
	for _, topic := range topics {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: d.prefix + topic})
	}
	var buf bytes.Buffer
	if err := pk.UnsubscribeEncode(&buf); err != nil {
		d.t.Fatal(err)
	}
	d.write(buf.Bytes())
	if ack, ok := d.read(10 * time.Second); !ok || ack.FixedHeader.Type != packets.Unsuback {
		d.t.Fatalf("UNSUBACK: %+v", ack)
	}
}

// TestCommandsWaitingStayQueuedAfterUnsubscribe: a device with a
// Receive Maximum of 1 that unsubscribes from cmd while commands wait
// for its window is sent none of them when it acknowledges the one in
// flight (the service sends on a topic only while the device holds a
// subscription to it); they stay queued, and its next SUBSCRIBE gets
// them, in order.
func TestCommandsWaitingStayQueuedAfterUnsubscribe(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-unsub")
	d := connectV5Device(t, f.s.mqtt["tcp"], "cmd-unsub", secret, 1)
	d.subscribe("cmd")
	var ids []int64
	for i := range 3 {
		ids = append(ids, f.command(fmt.Sprintf(`{"seq_no":%d,"device_name":"cmd-unsub","name":"ping","ttl":60,"wait":0}`, 9101+i)).CmdID)
	}
	first, _ := d.publish()
	d.unsubscribe("cmd")
	d.puback(first.PacketID)
	if pk, ok := d.read(time.Second); ok {
		t.Fatalf("sent on %s after the UNSUBSCRIBE: %s", pk.TopicName, pk.Payload)
	}
	for _, id := range ids[1:] {
		if got := f.getCommand(id, 0); got.State != "queued" {
			t.Fatalf("command %d after the UNSUBSCRIBE: %+v, want queued", id, got)
		}
	}
	d.subscribe("cmd")
	for _, id := range ids[1:] {
		pk, topic := d.publish()
		if topic != "cmd" || string(pk.Properties.CorrelationData) != fmt.Sprint(id) {
			t.Fatalf("after the SUBSCRIBE got %q %s, want command %d", topic, pk.Payload, id)
		}
		d.puback(pk.PacketID)
	}
}

// TestControlPublishesWithinReceiveMaximum: with a Receive Maximum of 1
// and a command unacknowledged, the service's own notices to the device
// (the command's cmd/cancel, a new desired document) wait as a message
// does; each PUBACK lets one more go, the notices first, and the device
// never has two publishes unacknowledged.
func TestControlPublishesWithinReceiveMaximum(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("ctl-rm")
	d := connectV5Device(t, f.s.mqtt["tcp"], "ctl-rm", secret, 1)
	d.subscribe("cmd", "cmd/cancel", "property/desired", "msg")
	v := f.command(`{"seq_no":9201,"device_name":"ctl-rm","name":"ping","ttl":60,"wait":0}`)
	cmd, topic := d.publish()
	if topic != "cmd" {
		t.Fatalf("got %q, want the command", topic)
	}
	var c cmdView
	f.restOK("DELETE", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", v.CmdID), "", &c)
	var op struct {
		OpCode int `json:"op_code"`
	}
	f.restOK("POST", "/device/v1/property",
		`{"seq_no":9202,"device_name":"ctl-rm","version":1,"properties":[{"name":"led","value":1}]}`, &op)
	if op.OpCode != 0 {
		t.Fatalf("set desired: op_code %d", op.OpCode)
	}
	f.send("ctl-rm", "m1", 60)
	if pk, ok := d.read(time.Second); ok {
		t.Fatalf("a second PUBLISH unacknowledged under Receive Maximum 1: %s %s", pk.TopicName, pk.Payload)
	}
	d.puback(cmd.PacketID)
	for _, want := range []string{"cmd/cancel", "property/desired", "msg"} {
		pk, topic := d.publish()
		if topic != want {
			t.Fatalf("got %q %s, want %s", topic, pk.Payload, want)
		}
		if pk, ok := d.read(300 * time.Millisecond); ok {
			t.Fatalf("with %s unacknowledged the device got %s %s", want, pk.TopicName, pk.Payload)
		}
		d.puback(pk.PacketID)
	}
}

// TestCommandsFirstAfterReconnect: a device that connects again and
// subscribes to msg and cmd in one SUBSCRIBE gets its waiting commands
// ahead of its pending messages, the message left unacknowledged on its
// last connection included, whichever filter it lists first.
func TestCommandsFirstAfterReconnect(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-re")
	d := connectV5Device(t, f.s.mqtt["tcp"], "cmd-re", secret, 1)
	d.subscribe("msg", "cmd")
	f.send("cmd-re", "m0", 3600)
	if _, topic := d.publish(); topic != "msg" {
		t.Fatalf("got %q, want msg", topic)
	}
	v := f.command(`{"seq_no":9101,"device_name":"cmd-re","name":"ping","ttl":600,"wait":0}`)
	f.send("cmd-re", "m1", 3600)
	for round, order := range [][]string{{"msg", "cmd"}, {"cmd", "msg"}, {"msg", "cmd"}, {"#"}, {"msg", "cmd"}, {"msg", "cmd"}} {
		d.c.Close()
		d = connectV5Device(t, f.s.mqtt["tcp"], "cmd-re", secret, 1)
		d.subscribe(order...)
		pk, topic := d.publish()
		if topic != "cmd" || string(pk.Properties.CorrelationData) != fmt.Sprint(v.CmdID) {
			t.Fatalf("round %d, SUBSCRIBE to %v: the first PUBLISH is %q %s, want the command %d", round, order, topic, pk.Payload, v.CmdID)
		}
	}
}
