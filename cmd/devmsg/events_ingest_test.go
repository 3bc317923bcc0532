package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// readLog returns the events of the app's log for the device, in order.
func readLog(t *testing.T, st store.Store, appKey, device string) []events.Wire {
	t.Helper()
	p, err := st.ReadEvents(context.Background(), store.EventQuery{AppKey: appKey, DeviceName: device, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return events.ToWires(p.Events)
}

var pubackRE = regexp.MustCompile(`received PUBACK \(Mid: \d+, RC:(\d+)\)`)

// mosquittoPub runs mosquitto_pub with -d and returns the reason codes
// of the PUBACKs it received.
func mosquittoPub(t *testing.T, stdin string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("mosquitto_pub", append([]string{"-d"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, _ := cmd.CombinedOutput() // a refused publish may fail the command
	var rcs []string
	for _, m := range pubackRE.FindAllStringSubmatch(string(out), -1) {
		rcs = append(rcs, m[1])
	}
	if len(rcs) == 0 && !strings.Contains(string(out), "PUBLISH") {
		t.Fatalf("mosquitto_pub %v: %s", args, out)
	}
	return rcs
}

// TestTelemetryFromMosquitto: mosquitto_pub, in MQTT 5 and 3.1.1,
// publishes telemetry (text and binary, up to 64 KiB) and event reports;
// each PUBACK with reason 0 means the event is in the log, and a publish
// the service refuses gets its reason code (0x99 malformed, 0x97 over the
// device's publish rate) and leaves nothing in the log.
func TestTelemetryFromMosquitto(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	f := newFleet(t)
	secret := f.createDevice("mosq-up")
	host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
	prefix := "d/" + demoKey + "/mosq-up/"
	v5 := []string{"-V", "mqttv5", "-q", "1", "-h", host, "-p", port, "-u", demoKey + "/mosq-up", "-P", secret}
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, b, 0o600))
		return p
	}
	full := make([]byte, events.MaxPayload)
	for i := range full {
		full[i] = 'a' + byte(i%26)
	}
	for _, c := range []struct {
		args []string
		rc   string
	}{
		{[]string{"-t", prefix + "up", "-m", "21.5"}, "0"},
		{[]string{"-t", prefix + "up/bin", "-f", file("bin", []byte{0, 1, 0xfe, 0xff})}, "0"},
		{[]string{"-t", prefix + "up/full", "-f", file("full", full)}, "0"},
		{[]string{"-t", prefix + "up/over", "-f", file("over", append(full, 'x'))}, "153"},
		{[]string{"-t", prefix + "up/" + strings.Repeat("s", 129), "-m", "x"}, "153"},
		{[]string{"-t", prefix + "event", "-m", `{"name":"low_battery","content":"12%","type":1}`}, "0"},
		{[]string{"-t", prefix + "event", "-m", `{"name":"","type":1}`}, "153"},
	} {
		if got := mosquittoPub(t, "", append(v5, c.args...)...); len(got) != 1 || got[0] != c.rc {
			t.Errorf("mosquitto_pub %s: PUBACK reason codes %v, want [%s]", c.args[:2], got, c.rc)
		}
	}
	v311 := append([]string{"-V", "mqttv311"}, v5[2:]...)
	if got := mosquittoPub(t, "", append(v311, "-t", prefix+"up/v311", "-m", "three")...); len(got) != 1 || got[0] != "0" {
		t.Errorf("3.1.1 publish: PUBACKs %v", got)
	}

	log := readLog(t, f.s.m.store, demoKey, "mosq-up")
	var got []string
	for _, e := range log {
		if e.Type != events.TypeUp && e.Type != events.TypeEvent {
			continue
		}
		var d struct {
			Topic, Payload, Encoding, Name, Content string
			QoS                                     int
		}
		must(t, json.Unmarshal(e.Data, &d))
		if e.Type == events.TypeEvent {
			got = append(got, fmt.Sprintf("event %s %s", d.Name, d.Content))
			continue
		}
		if len(d.Payload) > 20 {
			d.Payload = fmt.Sprintf("%d bytes", len(d.Payload))
		}
		got = append(got, fmt.Sprintf("%s %d %s %s", d.Topic, d.QoS, d.Encoding, d.Payload))
	}
	want := []string{"up 1 utf8 21.5", "up/bin 1 base64 AAH+/w==", "up/full 1 utf8 65536 bytes",
		"event low_battery 12%", "up/v311 1 utf8 three"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("device events in the log:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Over the publish rate (50/s, bursts of 100): refused with 0x97, and
	// every PUBACK 0 is an event in the log.
	lines := strings.Repeat("burst\n", 150)
	rcs := mosquittoPub(t, lines, append(v5, "-t", prefix+"up/burst", "-l")...)
	counts := map[string]int{}
	for _, rc := range rcs {
		counts[rc]++
	}
	stored := 0
	for _, e := range readLog(t, f.s.m.store, demoKey, "mosq-up") {
		if strings.Contains(string(e.Data), `"topic":"up/burst"`) {
			stored++
		}
	}
	// (mosquitto_pub -l may exit before reading the last PUBACKs.)
	if counts["151"] == 0 || counts["0"] > stored || counts["0"]+counts["151"] != len(rcs) {
		t.Fatalf("a burst of 150: PUBACK reason codes %v, %d events stored", counts, stored)
	}
	t.Logf("a burst of 150: %v PUBACKs, %d events stored", counts, stored)
	resp, err := http.Get("http://" + f.s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// Every publish of the burst was stored or refused.
	for reason, n := range map[string]int{"quota": 150 - stored, "malformed": 3, "error": 0} {
		if want := fmt.Sprintf("devmsg_mqtt_publishes_refused_total{reason=%q} %d\n", reason, n); !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestNodeLostAfterKill9: devices connected when the server is killed
// get their offline (node_lost) in the log when it starts again, each
// after the online of the connection it ends.
func TestNodeLostAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	p := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	app := p.createApp(t, "node-lost")
	st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[{"name":"lost-1"},{"name":"lost-2"}]}`)
	var cr struct {
		Resp []struct {
			DeviceName   string `json:"device_name"`
			DeviceSecret string `json:"device_secret"`
		}
	}
	if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != 2 {
		t.Fatalf("create devices: %d %s", st, body)
	}
	for _, d := range cr.Resp {
		c := connectDevice(t, p.mqtt, app.Key, d.DeviceName, d.DeviceSecret, false, func(paho.Message) {})
		defer c.Disconnect(0)
		waitFor(t, 10*time.Second, d.DeviceName+" online", func() bool {
			_, b := p.call(t, app.Key, app.MasterSecret, "GET", "/device/v1/status?device_name="+d.DeviceName, "")
			return strings.Contains(string(b), `"online":true`) || strings.Contains(string(b), `"status":1`)
		})
	}
	must(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()

	q := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	must(t, q.cmd.Process.Signal(syscall.SIGTERM))
	_ = q.cmd.Wait()
	s, err := pebble.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range cr.Resp {
		var got []string
		for _, e := range readLog(t, s, app.Key, d.DeviceName) {
			switch e.Type {
			case events.TypeOnline:
				got = append(got, "online "+string(e.Data))
			case events.TypeOffline:
				var off events.Offline
				must(t, json.Unmarshal(e.Data, &off))
				got = append(got, fmt.Sprintf("offline %s %s", off.Reason, off.ClientIP))
			}
		}
		want := []string{`online {"client_ip":"127.0.0.1","protocol":"3.1.1","transport":"tcp"}`, "offline node_lost 127.0.0.1"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: presence events\n%s\nwant\n%s", d.DeviceName, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// presenceLog returns the device's presence events in log order, as
// "online" and "offline REASON", and fails the test unless they
// alternate, starting with an online: every online followed by exactly
// one offline, never two of either in a row.
func presenceLog(t *testing.T, st store.Store, appKey, device string) []string {
	t.Helper()
	var got []string
	for _, e := range readLog(t, st, appKey, device) {
		switch e.Type {
		case events.TypeOnline:
			got = append(got, "online")
		case events.TypeOffline:
			var off events.Offline
			must(t, json.Unmarshal(e.Data, &off))
			got = append(got, "offline "+off.Reason)
		}
	}
	for i, e := range got {
		if strings.HasPrefix(e, "online") != (i%2 == 0) {
			t.Errorf("%s: presence events do not alternate at %d: %q", device, i, got)
			break
		}
	}
	return got
}

// TestOnlineTransportAndProtocol: device.online names the listener a
// connection came through and its MQTT version.
func TestOnlineTransportAndProtocol(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	f := newFleet(t)
	secret := f.createDevice("where")
	presence := func() int {
		n := 0
		for _, e := range readLog(t, f.s.m.store, demoKey, "where") {
			if e.Type == events.TypeOnline || e.Type == events.TypeOffline {
				n++
			}
		}
		return n
	}
	for i, url := range []string{"tcp://" + f.s.mqtt["tcp"], "ssl://" + f.s.mqtt["tls"], "ws://" + f.s.mqtt["ws"] + "/mqtt"} {
		d, err := f.connect("where", secret, devOpts{url: url})
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		d.c.Disconnect(250)
		// mochi establishes a session after its CONNACK: under load the
		// next connection could otherwise establish first.
		waitFor(t, 10*time.Second, url+" offline", func() bool { return presence() == 2*(i+1) })
	}
	host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
	mosquittoPub(t, "", "-V", "mqttv5", "-q", "1", "-h", host, "-p", port, "-u", demoKey+"/where", "-P", secret,
		"-t", "d/"+demoKey+"/where/up", "-m", "v5")
	var got []string
	for deadline := time.Now().Add(10 * time.Second); len(got) < 8; time.Sleep(20 * time.Millisecond) {
		got = nil
		for _, e := range readLog(t, f.s.m.store, demoKey, "where") {
			if e.Type == events.TypeOnline || e.Type == events.TypeOffline {
				got = append(got, e.Type+" "+string(e.Data))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("presence events after 10 s:\n%s", strings.Join(got, "\n"))
		}
	}
	want := []string{`"protocol":"3.1.1","transport":"tcp"`, `"protocol":"3.1.1","transport":"tls"`,
		`"protocol":"3.1.1","transport":"ws"`, `"protocol":"5","transport":"tcp"`}
	for i, w := range want {
		on, off := got[2*i], got[2*i+1]
		// (The reason is disconnect unless paho's quiesce ran out under
		// load before its DISCONNECT went out.)
		if !strings.HasPrefix(on, "device.online ") || !strings.Contains(on, w) || !strings.HasPrefix(off, "device.offline ") {
			t.Errorf("connection %d: %s, then %s; want an online with %s, then an offline", i, on, off, w)
		}
	}
}

// TestRefusedPublishLogged: a publish the service refuses (a malformed
// event report, a topic it takes nothing on, another device's topic) is
// logged at warn with the device, the topic and why, so an operator sees
// what a device doing it wrong is told only in a v5 reason code.
func TestRefusedPublishLogged(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed (Debian package mosquitto-clients; CI installs it)")
	}
	f := newFleet(t)
	secret := f.createDevice("mosq-bad")
	host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
	prefix := "d/" + demoKey + "/mosq-bad/"
	v5 := []string{"-V", "mqttv5", "-q", "1", "-h", host, "-p", port, "-u", demoKey + "/mosq-bad", "-P", secret}
	for _, c := range []struct{ topic, payload, reason string }{
		{prefix + "event", `{"name":""}`, "payload format invalid"},
		{prefix + "nothing-here", `{}`, `takes nothing on`},
		{"d/" + demoKey + "/someone-else/up", `{}`, "outside the device's topics"},
	} {
		mosquittoPub(t, c.payload, append(v5, "-t", c.topic, "-s")...)
		want := []string{"level=WARN", `msg="device publish refused"`, "device=mosq-bad", "topic=" + strings.TrimPrefix(c.topic, prefix), c.reason}
		deadline := time.Now().Add(10 * time.Second)
		for {
			line := logLine(f.s.stderr.String(), want)
			if line != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no warning %q for the publish to %s; the log:\n%s", want, c.topic, f.s.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// logLine returns the first line of log holding every fragment, or "".
func logLine(log string, fragments []string) string {
	for _, line := range strings.Split(log, "\n") {
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(line, f)
		}
		if ok {
			return line
		}
	}
	return ""
}
