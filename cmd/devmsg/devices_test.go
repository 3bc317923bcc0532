package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

func TestDeviceAuthFailures(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("auth-1")
	f.createDevice("auth-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/auth-off", `{"flag":1}`, nil)
	tests := []struct {
		name, device, secret, username string
	}{
		{"wrong secret", "auth-1", "not-the-secret", ""},
		{"empty secret", "auth-1", "", ""},
		{"unknown device", "auth-nobody", secret, ""},
		{"unknown app", "auth-1", secret, "no-such-app/auth-1"},
		{"another app's key", "auth-1", secret, "demo-master-secret/auth-1"},
		{"no device in username", "auth-1", secret, demoKey},
		{"disabled device", "auth-off", secret, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.connect(tc.device, tc.secret, devOpts{username: tc.username})
			if !errors.Is(err, packets.ErrorRefusedNotAuthorised) {
				t.Fatalf("connect: %v, want CONNACK 5 (not authorized)", err)
			}
		})
	}
	if _, err := f.connect("auth-1", secret, devOpts{}); err != nil {
		t.Fatalf("right credentials refused: %v", err)
	}
	t.Run("MQTT 5 gets 0x87", func(t *testing.T) {
		if _, err := exec.LookPath("mosquitto_sub"); err != nil {
			t.Skip("mosquitto_sub not installed (Debian package mosquitto-clients; CI installs it)")
		}
		host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
		out, err := exec.Command("mosquitto_sub", "-V", "mqttv5", "-h", host, "-p", port, "-u", demoKey+"/auth-1", "-P", "wrong",
			"-t", "d/"+demoKey+"/auth-1/msg", "-W", "5").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Not authorized") {
			t.Fatalf("mosquitto_sub -V mqttv5 with a wrong secret: %v %s", err, out)
		}
	})
}

func TestDeviceTopicACL(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.mustConnect("acl-a", f.createDevice("acl-a"))
	b := f.mustConnect("acl-b", f.createDevice("acl-b"), "#")
	for _, topic := range []string{"d/" + demoKey + "/acl-b/msg", "d/" + demoKey + "/acl-b/#", "d/" + demoKey + "/+/msg", "d/other-app/acl-a/msg", "#", "$SYS/#", "acl-a/msg"} {
		if code := a.subscribeTo(t, topic); code != 0x80 {
			t.Errorf("SUBSCRIBE %s granted %#x, want 0x80", topic, code)
		}
	}
	if code := a.subscribe(t, "#"); code != 1 { // relative: its own d/{app}/acl-a/#
		t.Errorf("SUBSCRIBE to its own topics: %#x", code)
	}
	// Publishing into another device's topics ends a 3.1.1 connection,
	// and nothing reaches the other device.
	a.c.Publish("d/"+demoKey+"/acl-b/msg", 1, false, `{"msgid":"1","msg_body":"spoof"}`)
	select {
	case <-a.lost:
	case <-time.After(5 * time.Second):
		t.Error("publishing into another device's topic did not end the connection")
	}
	// A device's own publishes reach no subscriber either, not even itself
	// (QoS 0: a publish to msg, a topic the service takes nothing on, is
	// refused without a PUBACK; docs/device-protocol.md, "Refused
	// publishes").
	if tok := b.c.Publish(b.prefix+"msg", 0, false, `{"msgid":"2","msg_body":"loop"}`); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish msg: %v", tok.Error())
	}
	time.Sleep(200 * time.Millisecond)
	if got := b.received(); len(got) != 0 {
		t.Errorf("device received %v published by devices", got)
	}
}

func TestPresenceAndTakeover(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("pres-1")
	var base struct {
		TimeActive int64 `json:"time_active"`
	}
	f.restOK("GET", "/device/v1/baseinfo?device_name=pres-1", "", &base)
	if st := f.status("pres-1"); st.Status != 0 || st.LastLoginTime != "" || st.LastLogoutTime != "" || base.TimeActive != 0 {
		t.Fatalf("never connected: %+v, time_active %d", st, base.TimeActive)
	}
	before := time.Now().Unix()
	first := f.mustConnect("pres-1", secret, "msg")
	st := f.status("pres-1")
	login, _ := strconv.ParseInt(st.LastLoginTime, 10, 64)
	if st.Status != 1 || st.ClientIP != "127.0.0.1" || login < before || st.LastLogoutTime != "" {
		t.Fatalf("connected: %+v", st)
	}
	f.restOK("GET", "/device/v1/baseinfo?device_name=pres-1", "", &base)
	if base.TimeActive < before {
		t.Fatalf("time_active %d after the first connect at %d", base.TimeActive, before)
	}
	firstActive := base.TimeActive

	// Takeover by a second connection with another client id: the first
	// is disconnected, the device stays online and messages go to the new one.
	second, err := f.connect("pres-1", secret, devOpts{clientID: "pres-1-second", topics: []string{"msg"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the older connection was not disconnected on takeover")
	}
	time.Sleep(100 * time.Millisecond) // the old session's disconnect is processed
	if st := f.status("pres-1"); st.Status != 1 {
		t.Fatalf("after takeover: %+v, want online", st)
	}
	id := f.send("pres-1", "after takeover", 60)
	waitFor(t, 5*time.Second, "delivery to the new connection", func() bool { return slices.Equal(second.received(), ids(id)) })
	if got := first.received(); len(got) != 0 {
		t.Errorf("the taken-over connection received %v", got)
	}
	// Takeover with the same client id.
	third, err := f.connect("pres-1", secret, devOpts{clientID: "pres-1-second"})
	if err != nil {
		t.Fatal(err)
	}
	<-second.lost
	time.Sleep(100 * time.Millisecond)
	if st := f.status("pres-1"); st.Status != 1 {
		t.Fatalf("after same-id takeover: %+v, want online", st)
	}
	third.c.Disconnect(0)
	waitFor(t, 5*time.Second, "offline after disconnect", func() bool { return f.status("pres-1").Status == 0 })
	st = f.status("pres-1")
	if logout, _ := strconv.ParseInt(st.LastLogoutTime, 10, 64); logout < login {
		t.Fatalf("after disconnect: %+v", st)
	}

	// A burst of overlapping connections: presence ends matching the last.
	var last *device
	for i := range 20 {
		d, err := f.connect("pres-1", secret, devOpts{clientID: fmt.Sprint("burst-", i%3)})
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		if i%4 == 1 { // some end by themselves; the last (i = 19) stays
			d.c.Disconnect(0)
		}
		last = d
	}
	time.Sleep(300 * time.Millisecond)
	if st := f.status("pres-1"); st.Status != 1 {
		t.Fatalf("after a burst of takeovers the last connection is live but status is %+v", st)
	}
	last.c.Disconnect(0)
	waitFor(t, 5*time.Second, "offline after the last disconnect", func() bool { return f.status("pres-1").Status == 0 })
	f.restOK("GET", "/device/v1/baseinfo?device_name=pres-1", "", &base)
	if base.TimeActive != firstActive {
		t.Errorf("time_active moved from %d to %d; it is the first connection's", firstActive, base.TimeActive)
	}
}

func TestOfflineQueueDeliveredInOrder(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for _, tc := range []struct{ name, url string }{
		{"tcp", "tcp://" + f.s.mqtt["tcp"]},
		{"tls", "ssl://" + f.s.mqtt["tls"]},
		{"websocket", "ws://" + f.s.mqtt["ws"] + "/mqtt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "queue-" + tc.name
			secret := f.createDevice(name)
			var sent []int64
			for i := range 10 {
				sent = append(sent, f.send(name, fmt.Sprint("m", i), 60))
			}
			d, err := f.connect(name, secret, devOpts{url: tc.url, topics: []string{"msg"}})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "10 messages", func() bool { return len(d.received()) >= 10 })
			if got := d.received(); !slices.Equal(got, ids(sent...)) {
				t.Fatalf("received %v, want send order %v", got, sent)
			}
			for _, id := range sent {
				if m := f.waitState(id, "delivered"); !slices.Equal(m.types(), []int{0, 2, 4}) {
					t.Fatalf("message %d records %v", id, m.types())
				}
			}
		})
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("unsub-1")
	d := f.mustConnect("unsub-1", secret, "msg")
	first := f.send("unsub-1", "while subscribed", 60)
	waitFor(t, 5*time.Second, "delivery", func() bool { return slices.Equal(d.received(), ids(first)) })
	if tok := d.c.Unsubscribe(d.prefix + "msg"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	second := f.send("unsub-1", "after unsubscribe", 60)
	time.Sleep(300 * time.Millisecond)
	if got := d.received(); len(got) != 1 || f.message(second).State != "pending" {
		t.Fatalf("after UNSUBSCRIBE the device received %v", got)
	}
	d.subscribe(t, "msg")
	waitFor(t, 5*time.Second, "delivery after resubscribing", func() bool { return slices.Equal(d.received(), ids(first, second)) })
}

func TestNoPubackRedelivered(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("redeliver")
	id := f.send("redeliver", "ack me", 60)
	d, err := f.connect("redeliver", secret, devOpts{manualAck: true, topics: []string{"msg"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "first delivery", func() bool { return len(d.received()) == 1 })
	time.Sleep(200 * time.Millisecond)
	if m := f.message(id); m.State != "pending" {
		t.Fatalf("unacknowledged message is %s", m.State)
	}
	d.c.Disconnect(0)
	d2 := f.mustConnect("redeliver", secret, "msg")
	waitFor(t, 5*time.Second, "redelivery", func() bool { return slices.Equal(d2.received(), ids(id)) })
	f.waitState(id, "delivered")
}

func TestTTL(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("ttl-1")
	expiring := f.send("ttl-1", "soon gone", 1)
	if m := f.message(f.send("ttl-1", "now or never", 0)); m.State != "failed" || !slices.Equal(m.types(), []int{0, 2, 5}) || m.lastError() != 3006 {
		t.Fatalf("ttl 0 to an offline device: %+v", m)
	}
	if m := f.waitState(expiring, "expired"); !slices.Equal(m.types(), []int{0, 2, 5}) || m.lastError() != 3005 {
		t.Fatalf("ttl 1: %+v", m)
	}
	d := f.mustConnect("ttl-1", secret, "msg")
	now := f.send("ttl-1", "now", 0)
	waitFor(t, 5*time.Second, "ttl 0 delivery", func() bool { return slices.Equal(d.received(), ids(now)) })
	f.waitState(now, "delivered")
}

func TestQueueLimit(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.createDevice("full-1")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 125 {
				body := fmt.Sprintf(`{"seq_no":%d,"device_name":"full-1","msg_body":"x"}`, 100000+w*1000+i)
				if st, b := f.rest("POST", "/msg/v1/msg", body); st != 200 {
					t.Errorf("send: %d %s", st, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	over := f.send("full-1", "one too many", 60)
	if m := f.message(over); m.State != "failed" || !slices.Equal(m.types(), []int{0, 3}) || m.lastError() != 3004 {
		t.Fatalf("message 1001: %+v", m)
	}
}

func TestRetraction(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("retract-1")
	gone, kept := f.send("retract-1", "withdrawn", 60), f.send("retract-1", "kept", 60)
	var m msgView
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", gone), "", &m)
	if m.State != "retracted" || !slices.Equal(m.types(), []int{0, 2, 7}) {
		t.Fatalf("retract pending: %+v", m)
	}
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", gone), "", &m)
	if m.State != "retracted" || m.types()[3] != 8 || m.lastError() != 3009 {
		t.Fatalf("retract retracted: %+v", m)
	}
	d := f.mustConnect("retract-1", secret, "msg")
	f.waitState(kept, "delivered")
	if got := d.received(); !slices.Equal(got, ids(kept)) {
		t.Fatalf("received %v; the retracted %d must never arrive", got, gone)
	}
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", kept), "", &m)
	if m.State != "delivered" || !slices.Equal(m.types(), []int{0, 2, 4, 8}) || m.lastError() != 3008 {
		t.Fatalf("retract delivered: %+v", m)
	}
	if st, b := f.rest("DELETE", "/msg/v1/msg?msgid=12345", ""); st != 400 || !strings.Contains(string(b), "12345") {
		t.Fatalf("retract unknown: %d %s", st, b)
	}
}

func TestClickRecorded(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("click-1")
	other := f.mustConnect("click-2", f.createDevice("click-2"))
	id := f.send("click-1", "click me", 60)
	d := f.mustConnect("click-1", secret, "msg")
	f.waitState(id, "delivered")
	other.publish(t, "msg/click", fmt.Sprintf(`{"msgid":"%d"}`, id)) // not its message: ignored
	d.publish(t, "msg/click", fmt.Sprintf(`{"msgid":"%d"}`, id))
	waitFor(t, 5*time.Second, "click record", func() bool { return slices.Equal(f.message(id).types(), []int{0, 2, 4, 6}) })
}

func TestDesiredProperties(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("prop-1")
	d := f.mustConnect("prop-1", secret, "property/desired")
	d.publish(t, "property/get", `{}`)
	waitFor(t, 5*time.Second, "empty desired document", func() bool {
		return d.lastDesired() == `{"version":0,"properties":{},"time":0}`
	})
	f.restOK("POST", "/device/v1/property", `{"seq_no":1,"device_name":"prop-1","version":1,"properties":[{"name":"temp","value":21.5},{"name":"mode","value":"eco"}]}`, nil)
	var doc struct {
		Version    int64
		Properties map[string]any
		Time       int64
	}
	waitFor(t, 5*time.Second, "desired push", func() bool {
		return json.Unmarshal([]byte(d.lastDesired()), &doc) == nil && doc.Version == 1
	})
	if doc.Properties["temp"] != 21.5 || doc.Properties["mode"] != "eco" || doc.Time == 0 {
		t.Fatalf("pushed %s", d.lastDesired())
	}
	pushed := d.lastDesired()
	d.c.Disconnect(0)
	// A device that subscribes later gets the current document at once.
	later := f.mustConnect("prop-1", secret, "property/desired")
	waitFor(t, 5*time.Second, "document on subscribe", func() bool { return later.lastDesired() == pushed })
}

func TestReportedProperties(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("rep-1")
	d := f.mustConnect("rep-1", secret, "property/report/reply")
	report := func(payload, want string) {
		t.Helper()
		n := len(d.replies)
		d.publish(t, "property/report", payload)
		waitFor(t, 5*time.Second, "reply to "+payload, func() bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return len(d.replies) > n
		})
		if got := d.lastReply(); !strings.HasPrefix(got, want) {
			t.Fatalf("report %s: reply %s, want %s...", payload, got, want)
		}
	}
	report(`{"properties":{"temp":20,"mode":"eco"},"sdk_ver":"sdk-1","app_ver":"app-2"}`, `{"version":1,"code":0,"message":"ok"}`)
	report(`{"version":5,"properties":{"temp":22}}`, `{"version":5,"code":0,"message":"ok"}`)
	report(`{"version":5,"properties":{"temp":23}}`, `{"version":5,"code":6003,`)
	report(`{"properties":{"temp":24}}`, `{"version":6,"code":0,`)
	report(`not json`, `{"version":0,"code":1003,`)
	report(`{"properties":{"on":true}}`, `{"version":0,"code":1003,`)
	var p struct {
		SDKVer              string `json:"sdk_ver"`
		AppVer              string `json:"app_ver"`
		LastReportedVersion int64  `json:"last_reported_version"`
		LastReportedSTime   int64  `json:"last_reported_stime"`
		Properties          []struct {
			Name          string          `json:"name"`
			ReportedValue json.RawMessage `json:"reported_value"`
			ReportedSTime int64           `json:"reported_stime"`
		} `json:"properties"`
	}
	f.restOK("GET", "/device/v1/property?device_name=rep-1", "", &p)
	if p.SDKVer != "sdk-1" || p.AppVer != "app-2" || p.LastReportedVersion != 6 || p.LastReportedSTime == 0 || len(p.Properties) != 2 {
		t.Fatalf("property summary %+v", p)
	}
	for _, prop := range p.Properties {
		want := map[string]string{"temp": "24", "mode": `"eco"`}[prop.Name]
		if string(prop.ReportedValue) != want || prop.ReportedSTime == 0 {
			t.Errorf("%s: reported %s at %d, want %s", prop.Name, prop.ReportedValue, prop.ReportedSTime, want)
		}
	}
	// With a property model, reports are checked like property sets.
	f.restOK("PUT", "/admin/v1/apps/"+demoKey+"/properties", `{"properties":[{"name":"temp","type":"int","min":0,"max":100}]}`, nil)
	report(`{"properties":{"humidity":1}}`, `{"version":0,"code":6007,`)
	report(`{"properties":{"temp":"hot"}}`, `{"version":0,"code":6008,`)
	report(`{"properties":{"temp":101}}`, `{"version":0,"code":6009,`)
	report(`{"properties":{"temp":99}}`, `{"version":7,"code":0,`)
}

func TestDisablingConnectedDevice(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("dis-1")
	d, err := f.connect("dis-1", secret, devOpts{manualAck: true, topics: []string{"msg"}})
	if err != nil {
		t.Fatal(err)
	}
	id := f.send("dis-1", "never acknowledged", 60)
	waitFor(t, 5*time.Second, "delivery attempt", func() bool { return len(d.received()) == 1 })
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/dis-1", `{"flag":1}`, nil)
	select {
	case <-d.lost:
	case <-time.After(5 * time.Second):
		t.Fatal("a disabled device stayed connected")
	}
	if m := f.waitState(id, "failed"); !slices.Equal(m.types(), []int{0, 2, 5}) || m.lastError() != 3003 {
		t.Fatalf("pending message of a disabled device: %+v", m)
	}
	waitFor(t, 5*time.Second, "offline", func() bool { return f.status("dis-1").Status == 0 })
	if _, err := f.connect("dis-1", secret, devOpts{}); !errors.Is(err, packets.ErrorRefusedNotAuthorised) {
		t.Fatalf("a disabled device reconnected: %v", err)
	}
}

// TestMosquittoClientsAsDevice drives a device with Debian's
// mosquitto_sub and mosquitto_pub, which know nothing of this codebase.
func TestMosquittoClientsAsDevice(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"mosquitto_sub", "mosquitto_pub"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (Debian package mosquitto-clients; CI installs it)", bin)
		}
	}
	f := newFleet(t)
	secret := f.createDevice("mosq-1")
	id := f.send("mosq-1", "hello mosquitto", 60)
	host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
	auth := []string{"-h", host, "-p", port, "-u", demoKey + "/mosq-1", "-P", secret}
	out, err := exec.Command("mosquitto_sub", append(auth, "-q", "1", "-C", "1", "-W", "10", "-t", "d/"+demoKey+"/mosq-1/msg")...).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v %s", err, out)
	}
	var got struct {
		Msgid      string `json:"msgid"`
		Body       string `json:"msg_body"`
		SentTime   int64  `json:"sent_time"`
		ExpireTime int64  `json:"expire_time"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil || got.Msgid != fmt.Sprint(id) || got.Body != "hello mosquitto" || got.ExpireTime != got.SentTime+60 {
		t.Fatalf("mosquitto_sub printed %s", out)
	}
	f.waitState(id, "delivered")
	if out, err := exec.Command("mosquitto_pub", append(auth, "-q", "1", "-t", "d/"+demoKey+"/mosq-1/property/report",
		"-m", `{"properties":{"fw":"1.0.3"},"app_ver":"mosq"}`)...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	waitFor(t, 5*time.Second, "reported property", func() bool {
		_, b := f.rest("GET", "/device/v1/property?device_name=mosq-1", "")
		return strings.Contains(string(b), `"reported_value":"1.0.3"`) && strings.Contains(string(b), `"app_ver":"mosq"`)
	})
}
