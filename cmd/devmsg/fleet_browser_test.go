package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleBroadcastBrowser sends a broadcast from the console in
// headless Chromium and watches its progress bar move, without a reload,
// when an offline device connects and acknowledges its message.
func TestConsoleBroadcastBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.restOK("POST", "/device/v1/devices", `{"device":[{"name":"lamp-a","tags":["lamp"]},{"name":"lamp-b","tags":["lamp"]}]}`, nil)
	var info struct {
		DeviceSecret string `json:"device_secret"`
	}
	f.restOK("GET", "/device/v1/baseinfo?device_name=lamp-a", "", &info)
	b := newBrowser(t, "http://"+f.s.addr)
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")

	b.open("/console/apps/" + demoKey + "/broadcast")
	b.fill(map[string]string{"#broadcast-tag": "lamp", "#broadcast-body": "hello lamps"}, "#broadcast-submit")
	if got := b.text("#broadcast-progress"); !strings.Contains(got, "2 targets") {
		t.Fatalf("progress after the send:\n%s", got)
	}
	// The page stays; only its progress section is refreshed.
	waitFor(t, 15*time.Second, "queued 2 on the page", func() bool { return liveText(b, "broadcast-queued") == "2" })
	if d := liveText(b, "broadcast-delivered"); d != "0" {
		t.Fatalf("delivered %q before any device connected", d)
	}
	b.docShot("broadcast")
	lamp := f.mustConnect("lamp-a", info.DeviceSecret, "msg")
	waitReceived(t, lamp, 1)
	waitFor(t, 15*time.Second, "delivered 1 on the page", func() bool { return liveText(b, "broadcast-delivered") == "1" })
	var value float64
	b.run("read the bar", chromedp.Evaluate(`document.getElementById("broadcast-bar-delivered").value`, &value))
	if value != 1 {
		t.Errorf("delivered bar at %v, want 1", value)
	}
}

// liveText reads an element of the live progress section in one script
// step: the page replaces that section every 2 s, so a node looked up
// by one CDP call may be gone by the next.
func liveText(b *browser, id string) string {
	var text string
	b.run("read #"+id, chromedp.Evaluate(`(document.getElementById(`+strconv.Quote(id)+`) || {}).textContent || ""`, &text))
	return strings.TrimSpace(text)
}
