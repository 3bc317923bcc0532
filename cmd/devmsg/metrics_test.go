package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/events"
)

// scrape returns the server's /metrics text.
func (f *fleet) scrape() string {
	f.t.Helper()
	resp, err := http.Get("http://" + f.s.addr + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestFreshMetricsStartAtZero scrapes a server that has done nothing:
// every labelled counter whose label values are known is there at 0 (a
// dashboard's rate of failures reads 0, not "no data"), for the apps
// there are at start too. A refused subscription is then counted with
// its reason.
func TestFreshMetricsStartAtZero(t *testing.T) {
	f := newFleet(t)
	text := f.scrape()
	var want []string
	for _, r := range []string{"topic", "limit", "rate"} {
		want = append(want, fmt.Sprintf(`devmsg_mqtt_subscriptions_refused_total{reason="%s"} 0`, r))
	}
	for _, r := range []string{"quota", "malformed", "topic", "error"} {
		want = append(want, fmt.Sprintf(`devmsg_mqtt_publishes_refused_total{reason="%s"} 0`, r))
	}
	for _, typ := range events.Types {
		want = append(want, fmt.Sprintf(`devmsg_events_appended_total{type="%s"} 0`, typ))
	}
	for typ := 0; typ <= 8; typ++ {
		want = append(want, fmt.Sprintf(`devmsg_message_records_total{app="%s",type="%d"} 0`, demoKey, typ))
	}
	for _, o := range []string{"ok", "failed"} {
		want = append(want, fmt.Sprintf(`devmsg_callback_requests_total{app="%s",outcome="%s"} 0`, demoKey, o))
	}
	for _, r := range []string{"no app", "switch off", "type not selected", "no url"} {
		want = append(want, fmt.Sprintf(`devmsg_callback_records_dropped_total{app="%s",reason="%s"} 0`, demoKey, r))
	}
	for _, name := range []string{"queued", "delivered", "retried", "dead_lettered"} {
		want = append(want, fmt.Sprintf(`devmsg_callback_records_%s_total{app="%s"} 0`, name, demoKey))
	}
	for _, w := range want {
		if !strings.Contains(text, w+"\n") {
			t.Errorf("a fresh server's /metrics lacks %s", w)
		}
	}

	// A device subscribing to another device's topic is refused, and counted.
	secret := f.createDevice("metrics-1")
	host, port, _ := net.SplitHostPort(f.s.mqtt["tcp"])
	out, _ := exec.Command("mosquitto_sub", "-V", "mqttv5", "-h", host, "-p", port, "-u", demoKey+"/metrics-1", "-P", secret,
		"-t", "d/"+demoKey+"/someone-else/msg", "-C", "1", "-W", "3").CombinedOutput()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(f.scrape(), `devmsg_mqtt_subscriptions_refused_total{reason="topic"} 1`+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the refused subscription is not counted; mosquitto_sub said %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
