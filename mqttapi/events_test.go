package mqttapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// logOf returns the app's event log, in order.
func (w *world) logOf(types ...string) []events.Wire {
	w.t.Helper()
	p, err := w.st.ReadEvents(context.Background(), store.EventQuery{AppKey: appKey, Limit: 1000, Types: types})
	if err != nil {
		w.t.Fatal(err)
	}
	return events.ToWires(p.Events)
}

// dialAs connects a 3.1.1 client of the device with the client id.
func (w *world) dialAs(name, clientID string) (paho.Client, error) {
	opts := paho.NewClientOptions().AddBroker("tcp://" + w.mqtt).SetClientID(clientID).
		SetUsername(appKey + "/" + name).SetPassword(secret).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).SetConnectTimeout(5 * time.Second)
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	return c, tok.Error()
}

func publish(t *testing.T, c paho.Client, topic string, qos byte, payload any) {
	t.Helper()
	tok := c.Publish(topic, qos, false, payload)
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("publish to %s: no PUBACK", topic)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("publish to %s: %v", topic, err)
	}
}

// TestDevicePublishesEvents: telemetry and event reports a device
// publishes are in the app's log once their PUBACK has arrived, with the
// data docs/events.md ("Event types") gives; what breaks the rules of its
// topic is not stored (QoS 0 here: a refused 3.1.1 QoS 1 publish never
// completes).
func TestDevicePublishesEvents(t *testing.T) {
	w := newWorld(t)
	w.createDevice("sensor")
	c, err := w.dialAs("sensor", "sensor")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(0)
	prefix := "d/" + appKey + "/sensor/"
	binary := []byte{0xff, 0x00, 0xfe}
	publish(t, c, prefix+"up", 1, `{"t":21.5}`)
	publish(t, c, prefix+"up/temp/room-1", 1, binary)
	publish(t, c, prefix+"up/", 0, "empty suffix")
	publish(t, c, prefix+"up/"+strings.Repeat("x", 129), 0, "suffix too long")
	publish(t, c, prefix+"up/big", 0, make([]byte, events.MaxPayload+1))
	publish(t, c, prefix+"event", 0, `{"name":"door","type":7}`)
	publish(t, c, prefix+"event", 0, `not json`)
	publish(t, c, prefix+"event", 1, `{"name":"door","content":"opened","type":1,"time":1700000000000}`)
	publish(t, c, prefix+"up/"+strings.Repeat("x", 128), 1, make([]byte, events.MaxPayload))
	// The ACL keeps a device to its own prefix: another device's up and
	// event topics store nothing (QoS 0: 3.1.1 has no refusal).
	w.createDevice("other")
	publish(t, c, "d/"+appKey+"/other/up", 0, "spoofed")
	publish(t, c, "d/"+appKey+"/other/event", 0, `{"name":"spoofed","type":0}`)
	publish(t, c, "d/other-app/sensor/up", 0, "spoofed")
	publish(t, c, prefix+"up", 1, "last") // after the spoofs, on the same connection

	got := w.logOf(events.TypeUp, events.TypeEvent)
	if len(got) != 5 || !strings.Contains(string(got[4].Data), `"payload":"last"`) {
		t.Fatalf("log holds %d device events, want 5 ending with the last: %+v", len(got), got)
	}
	got = got[:4]
	want := []string{
		`device.up {"topic":"up","qos":1,"payload":"{\"t\":21.5}","encoding":"utf8"}`,
		`device.up {"topic":"up/temp/room-1","qos":1,"payload":"/wD+","encoding":"base64"}`,
		`device.event {"name":"door","content":"opened","type":1,"time":1700000000000,"report_seq":ID}`,
	}
	for i, want := range want {
		e := got[i]
		if s := e.Type + " " + strings.ReplaceAll(string(e.Data), `"report_seq":`+e.ID, `"report_seq":ID`); s != want {
			t.Errorf("event %d: %s, want %s", i, s, want)
		}
		if e.AppKey != appKey || e.DeviceName != "sensor" || e.Time == 0 {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	var big events.Up
	if err := json.Unmarshal(got[3].Data, &big); err != nil || len(big.Payload) != events.MaxPayload || big.Topic != "up/"+strings.Repeat("x", 128) {
		t.Errorf("64 KiB publish stored as topic %q, %d payload bytes: %v", big.Topic, len(big.Payload), err)
	}
}

// presence returns the device's online and offline events as
// "online 3.1.1 tcp 127.0.0.1" and "offline takeover".
func (w *world) presence(device string) []string {
	w.t.Helper()
	var out []string
	for _, e := range w.logOf(events.TypeOnline, events.TypeOffline) {
		if e.DeviceName != device {
			continue
		}
		if e.Type == events.TypeOnline {
			var on events.Online
			_ = json.Unmarshal(e.Data, &on)
			out = append(out, fmt.Sprintf("online %s %s %s", on.Protocol, on.Transport, on.ClientIP))
			continue
		}
		var off events.Offline
		_ = json.Unmarshal(e.Data, &off)
		if off.ClientIP != "127.0.0.1" || off.OnlineMS < 0 {
			w.t.Errorf("offline event %s", e.Data)
		}
		out = append(out, "offline "+off.Reason)
	}
	return out
}

// rawSession connects as the device over a bare connection, so a test
// decides exactly how it ends: DISCONNECT, or dropped without one.
func (w *world) rawSession(device string) net.Conn {
	w.t.Helper()
	conn, err := net.Dial("tcp", w.mqtt)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { conn.Close() })
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession, cp.Keepalive = "MQTT", 4, true, 30
	cp.ClientIdentifier, cp.UsernameFlag, cp.PasswordFlag = "raw", true, true
	cp.Username, cp.Password = appKey+"/"+device, []byte(secret)
	if err := cp.Write(conn); err != nil {
		w.t.Fatal(err)
	}
	ack, err := packets.ReadPacket(conn)
	if err != nil || ack.(*packets.ConnackPacket).ReturnCode != 0 {
		w.t.Fatalf("CONNACK %v %v", ack, err)
	}
	return conn
}

// TestPresenceEvents: each connection's online is followed by exactly
// one offline with the reason it ended, written with the presence
// change: clean DISCONNECT, a dropped connection, a takeover (the old
// connection's offline before the new one's online), a kick.
func TestPresenceEvents(t *testing.T) {
	w := newWorld(t)
	w.createDevice("lamp")
	ctx := context.Background()
	waitPresence := func(want ...string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("presence events %q", want), func() bool { return fmt.Sprint(w.presence("lamp")) == fmt.Sprint(want) })
	}
	const on = "online 3.1.1 tcp 127.0.0.1"

	conn := w.rawSession("lamp")
	if _, err := conn.Write([]byte{packets.Disconnect << 4, 0}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitPresence(on, "offline disconnect")

	w.rawSession("lamp").Close()
	waitPresence(on, "offline disconnect", on, "offline error")

	if _, err := w.dialAs("lamp", "b"); err != nil {
		t.Fatal(err)
	}
	// mochi writes the CONNACK before it establishes the session, so "c"
	// could be established before "b", which would then be closed
	// unreported (broker TestTakeoverAfterConnackOrder), and there would
	// be no takeover to see: wait for "b"'s online first.
	waitPresence(on, "offline disconnect", on, "offline error", on)
	if _, err := w.dialAs("lamp", "c"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the takeover", func() bool { return w.broker.Connected() == 1 })
	waitPresence(on, "offline disconnect", on, "offline error", on, "offline takeover", on)
	if d, err := w.st.GetDevice(ctx, appKey, "lamp"); err != nil || d.Status != 1 {
		t.Fatalf("after the takeover: %+v %v", d, err)
	}

	if _, err := w.st.UpdateDevice(ctx, appKey, "lamp", func(d *store.Device) error { d.Flag = store.FlagDisabled; return nil }); err != nil {
		t.Fatal(err)
	}
	w.gw.Disabled(ctx, appKey, "lamp")
	waitFor(t, "the kick", func() bool { return w.broker.Connected() == 0 })
	waitPresence(on, "offline disconnect", on, "offline error", on, "offline takeover", on, "offline kicked")
}

// TestPresenceStorm: 20 rapid connections of one device, racing each
// other (takeovers) and leaving (DISCONNECT), leave a log in which its
// online and offline events strictly alternate, every offline with a
// reason of how that connection ended (error: a takeover may cut a
// DISCONNECT short), and the last connection online
// with no offline after it.
func TestPresenceStorm(t *testing.T) {
	w := newWorld(t)
	w.createDevice("storm")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := w.dialAs("storm", fmt.Sprint("s", i))
			if err != nil {
				return // refused while another took over: no events
			}
			if i%3 == 0 {
				c.Disconnect(100)
			}
		}()
		if i%4 == 3 {
			wg.Wait() // in waves of four, racing within a wave
		}
	}
	wg.Wait()
	// mochi writes the CONNACK before it establishes the session, so a
	// storm connection may still establish after the last one and take
	// it over: connect the last one until it stays.
	for try := 0; ; try++ {
		last, err := w.dialAs("storm", "last")
		if err != nil {
			t.Fatal(err)
		}
		defer last.Disconnect(0)
		time.Sleep(200 * time.Millisecond)
		if s := w.broker.Session(appKey, "storm"); s != nil && s.ClientID == "last" && w.broker.Connected() == 1 {
			break
		}
		if try == 10 {
			t.Fatal("the last connection never stayed")
		}
	}
	// The log is settled once the last login's online ends it; wait a
	// moment more for a late offline, which would be the bug.
	var got []string
	waitFor(t, "the last online", func() bool {
		got = w.presence("storm")
		return len(got) > 0 && got[len(got)-1] == "online 3.1.1 tcp 127.0.0.1"
	})
	time.Sleep(300 * time.Millisecond)
	got = w.presence("storm")
	for i, e := range got {
		wantOnline := i%2 == 0
		if strings.HasPrefix(e, "online") != wantOnline ||
			!wantOnline && e != "offline takeover" && e != "offline disconnect" && e != "offline error" {
			t.Fatalf("event %d is %q: presence events do not alternate with known reasons:\n%s", i, e, strings.Join(got, "\n"))
		}
	}
	if len(got)%2 != 1 {
		t.Fatalf("%d presence events, want the last online unpaired:\n%s", len(got), strings.Join(got, "\n"))
	}
	if d, err := w.st.GetDevice(context.Background(), appKey, "storm"); err != nil || d.Status != 1 {
		t.Fatalf("after the storm: %+v %v", d, err)
	}
	t.Logf("%d presence events", len(got))
}

// TestPropertyReported: an accepted property report is in the log as
// property.reported, with the version the store assigned; a refused one
// is not.
func TestPropertyReported(t *testing.T) {
	w := newWorld(t)
	w.createDevice("thermo")
	c, err := w.dialAs("thermo", "thermo")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(0)
	topic := "d/" + appKey + "/thermo/property/report"
	publish(t, c, topic, 1, `{"properties":{"temp":21},"sdk_ver":"1.2","app_ver":"3.4"}`)
	publish(t, c, topic, 1, `{"version":1,"properties":{"temp":22}}`) // not above 1: refused
	publish(t, c, topic, 1, `{"version":5,"properties":{"mode":"eco"}}`)
	var got []string
	waitFor(t, "two reports", func() bool {
		got = nil
		for _, e := range w.logOf(events.TypeReported) {
			got = append(got, string(e.Data))
		}
		return len(got) >= 2
	})
	want := []string{
		`{"version":1,"properties":{"temp":21},"sdk_ver":"1.2","app_ver":"3.4"}`,
		`{"version":5,"properties":{"mode":"eco"},"sdk_ver":"1.2","app_ver":"3.4"}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("property.reported events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDeletedDeviceOffline: a device deleted while connected has its
// offline (kicked) in the log as soon as Deleted returns, before the
// store's delete, so the delete cannot leave its online unpaired.
func TestDeletedDeviceOffline(t *testing.T) {
	w := newWorld(t)
	w.createDevice("gone")
	ctx := context.Background()
	if _, err := w.dialAs("gone", "gone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the online", func() bool { return len(w.presence("gone")) == 1 })
	if _, err := w.st.UpdateDevice(ctx, appKey, "gone", func(d *store.Device) error { d.Flag = store.FlagDisabled; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.gw.Deleted(ctx, appKey, "gone"); err != nil {
		t.Fatal(err)
	}
	if got := w.presence("gone"); fmt.Sprint(got) != "[online 3.1.1 tcp 127.0.0.1 offline kicked]" {
		t.Fatalf("presence events when Deleted returned: %q", got)
	}
	if err := w.st.DeleteDevice(ctx, appKey, "gone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session to end", func() bool { return w.broker.Connected() == 0 })
	if got := w.presence("gone"); len(got) != 2 {
		t.Fatalf("presence events after the delete: %q", got)
	}
}

// failingLog is a store whose event log refuses every append.
type failingLog struct{ store.Store }

func (failingLog) AppendEvents(context.Context, []store.Event) ([]store.Event, error) {
	return nil, errors.New("disk full")
}

// TestUnstoredEventRefused: telemetry the store cannot take is refused,
// to an MQTT 5 device with PUBACK 0x80, and logged and counted; nothing
// acknowledges it.
func TestUnstoredEventRefused(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	w := newWorldOn(t, failingLog{memory.New()})
	w.createDevice("full")
	host, port, _ := strings.Cut(w.mqtt, ":")
	out, _ := exec.Command("mosquitto_pub", "-d", "-V", "mqttv5", "-q", "1", "-h", host, "-p", port,
		"-u", appKey+"/full", "-P", secret, "-t", "d/"+appKey+"/full/up/temp", "-m", "21").CombinedOutput()
	if !strings.Contains(string(out), "RC:128") {
		t.Fatalf("mosquitto_pub to a store that cannot take the event:\n%s\nwant PUBACK reason 128 (0x80)", out)
	}
	if got := w.broker.PublishesRefused(); got.Failed != 1 {
		t.Errorf("refusals counted %+v, want 1 failed", got)
	}
	if log := w.logs.String(); !strings.Contains(log, "store device event; publish refused") || !strings.Contains(log, "disk full") {
		t.Errorf("the log says nothing of the refusal:\n%s", log)
	}
}

// TestUnknownTopicRefused: a publish under the device's own prefix to a
// topic the service takes nothing on is refused (MQTT 5 PUBACK 0x90,
// topic name invalid) and counted, where it used to be acknowledged and
// dropped; every topic a device does publish to still gets PUBACK 0.
func TestUnknownTopicRefused(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	w := newWorld(t)
	w.createDevice("sensor")
	host, port, _ := strings.Cut(w.mqtt, ":")
	pub := func(topic, payload string) string {
		out, _ := exec.Command("mosquitto_pub", "-d", "-V", "mqttv5", "-q", "1", "-h", host, "-p", port,
			"-u", appKey+"/sensor", "-P", secret, "-t", "d/"+appKey+"/sensor/"+topic, "-m", payload).CombinedOutput()
		return string(out)
	}
	unknown := []string{"events", "ups/x", "event/x", "UP", "upx", "msg", "property/desired", "msg/click/x"}
	for _, topic := range unknown {
		if out := pub(topic, `{"name":"n","type":0}`); !strings.Contains(out, "RC:144") {
			t.Errorf("publish to %s:\n%s\nwant PUBACK reason 144 (0x90)", topic, out)
		}
	}
	for _, c := range []struct{ topic, payload string }{
		{"up", "1"}, {"up/temp", "2"}, {"event", `{"name":"n","type":0}`},
		{"msg/click", `{"msgid":"1"}`}, {"property/get", "{}"}, {"property/report", `{"properties":{}}`},
	} {
		if out := pub(c.topic, c.payload); !strings.Contains(out, "received PUBACK (Mid: 1, RC:0)") {
			t.Errorf("publish to %s:\n%s\nwant PUBACK 0", c.topic, out)
		}
	}
	if got := w.broker.PublishesRefused(); got.Topic != int64(len(unknown)) {
		t.Errorf("refusals counted %+v, want %d for the topic", got, len(unknown))
	}
	if got := w.logOf(events.TypeUp, events.TypeEvent); len(got) != 3 {
		t.Errorf("log holds %d device events, want the 3 of up, up/temp and event", len(got))
	}
}

// TestEmptyUpLevelRefused: telemetry to a suffix with an empty level is
// refused as malformed (MQTT 5 PUBACK 0x99) and not stored.
func TestEmptyUpLevelRefused(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	w := newWorld(t)
	w.createDevice("sensor")
	host, port, _ := strings.Cut(w.mqtt, ":")
	for _, topic := range []string{"up//x", "up/a/", "up/a//b"} {
		out, _ := exec.Command("mosquitto_pub", "-d", "-V", "mqttv5", "-q", "1", "-h", host, "-p", port,
			"-u", appKey+"/sensor", "-P", secret, "-t", "d/"+appKey+"/sensor/"+topic, "-m", "1").CombinedOutput()
		if !strings.Contains(string(out), "RC:153") {
			t.Errorf("publish to %s:\n%s\nwant PUBACK reason 153 (0x99)", topic, out)
		}
	}
	if got := w.logOf(events.TypeUp); len(got) != 0 {
		t.Errorf("stored %d device.up events, want none", len(got))
	}
}
