package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// shotWidths are the widths every console page is looked at: a desktop
// window and a phone (emulated as a mobile device, so the page's
// viewport meta applies).
var shotWidths = []struct {
	name          string
	width, height int64
	mobile        bool
}{
	{"desktop", 1280, 900, false},
	{"phone", 390, 844, true},
}

// TestConsoleScreenshots opens every console page, as the admin and as an
// app owner, at desktop and phone widths with a fleet at work, saves a
// screenshot of each (in $DEVMSG_SHOTS when set, to be looked at) and
// checks what a person would see: no page wider than the screen, the
// device count on the overview, charts on the overview, sparklines on
// the device page, one line per event, radio buttons beside their
// labels, read-only fields that look read-only, and device names that
// do not break inside a name on a phone.
func TestConsoleScreenshots(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t, "--events.linger", "50ms")
	dir := os.Getenv("DEVMSG_SHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	app := "/console/apps/" + demoKey

	// A fleet: long device names with tags, one online that publishes
	// telemetry and reports properties, messages, a broadcast, a callback
	// URL and an event webhook.
	names := []string{"greenhouse-north-0001", "greenhouse-north-0002", "greenhouse-south-0003", "lamp-04"}
	var list []string
	for _, n := range names {
		list = append(list, fmt.Sprintf(`{"name":%q,"tags":["greenhouse"]}`, n))
	}
	var created struct {
		Resp []struct {
			DeviceSecret string `json:"device_secret"`
		} `json:"resp"`
	}
	f.restOK("POST", "/device/v1/devices", `{"device":[`+strings.Join(list, ",")+`]}`, &created)
	rcv := newReceiver(t)
	f.addURL(rcv.url("/cb"))
	f.setCallback(`{"enabled":true,"types":[0,1,2,3,4,5]}`)
	ercv := newEventReceiver(t)
	f.restOK("POST", "/admin/v1/apps/"+demoKey+"/events/webhooks", fmt.Sprintf(`{"url":%q,"types":["device.up"]}`, ercv.url("/events")), nil)
	d := f.mustConnect(names[0], created.Resp[0].DeviceSecret, "msg")
	for i := range 12 {
		d.publish(t, "up/env", fmt.Sprintf(`{"temp":%.1f,"hum":%d,"note":"reading %d"}`, 20+float64(i%5)/2, 40+i, i))
		d.publish(t, "property/report", fmt.Sprintf(`{"properties":{"level":%d,"mode":"eco"}}`, i*3))
	}
	d.publish(t, "up/raw", "\x01\x02\xff")
	msgid := f.send(names[0], "hello from the screenshots", 600)
	f.send(names[2], "to an offline device", 600)
	var bc struct {
		BroadcastID int64 `json:"broadcast_id"`
	}
	f.restOK("POST", "/msg/v1/broadcast", fmt.Sprintf(`{"seq_no":%d,"target":{"tag":"greenhouse"},"msg_body":"water now"}`, f.seq.Add(1)), &bc)
	f.waitState(msgid, "delivered")

	b := newBrowser(t, "http://"+f.s.addr)
	adminPages := []struct{ name, path string }{
		{"overview", "/console/"},
		{"apps", "/console/apps"},
		{"app", app},
		{"devices", app + "/devices"},
		{"device", app + "/devices/" + names[0]},
		{"messages", app + "/messages"},
		{"trace", fmt.Sprintf("%s/messages?msgid=%d", app, msgid)},
		{"events", app + "/events?after=0"},
		{"webhooks", app + "/webhooks"},
		{"broadcast", fmt.Sprintf("%s/broadcast?id=%d", app, bc.BroadcastID)},
		{"callbacks", app + "/callbacks"},
		{"jobs", app + "/jobs"},
	}
	for _, w := range shotWidths {
		b.run("size "+w.name, viewport(w.width, w.height, w.mobile))
		b.open("/console/login")
		shot(b, dir, "login", w.name)
		if w.name == "desktop" {
			b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")
		}
		for _, p := range adminPages {
			b.open(p.path)
			shot(b, dir, p.name, w.name)
			checkFits(t, b, p.name, w.name)
		}
		checkOverview(t, b, w.name)
		checkDevicePage(t, b, app+"/devices/"+names[0])
		checkEventLines(t, b, app+"/events?after=0", w.name)
		checkRadios(t, b, app+"/broadcast")
		if w.mobile {
			checkNamesUnbroken(t, b, app+"/devices")
			checkNamesUnbroken(t, b, app+"/messages")
		}
	}

	// The app owner: its own overview and read-only rate limits.
	b.click("#logout-submit")
	b.run("desktop", chromedp.EmulateViewport(1280, 900))
	b.open("/console/login")
	b.fill(map[string]string{"#login-app-key": demoKey, "#login-app-secret": demoSecret}, "#login-app-submit")
	for _, w := range shotWidths {
		b.run("size "+w.name, viewport(w.width, w.height, w.mobile))
		b.open("/console/")
		shot(b, dir, "owner-overview", w.name)
		checkFits(t, b, "owner-overview", w.name)
		if got := b.text("#overview-devices"); got != fmt.Sprint(len(names)) {
			t.Errorf("%s: the owner's overview shows %q devices, want %d", w.name, got, len(names))
		}
		if got := b.text("#overview-sent"); got == "" || got == "0" {
			t.Errorf("%s: the owner's overview shows %q messages sent", w.name, got)
		}
		b.open(app)
		shot(b, dir, "owner-app", w.name)
		var style string
		b.run("read-only style", chromedp.Evaluate(`(() => { const s = getComputedStyle(document.getElementById("ratelimit-create"));
			return s.borderTopStyle + " " + (s.backgroundColor !== getComputedStyle(document.getElementById("secret-rotate-confirm")).backgroundColor); })()`, &style))
		if style != "dashed true" {
			t.Errorf("%s: a read-only rate limit looks editable (border style, background unlike an editable field's: %s)", w.name, style)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// viewport sizes the window, as a phone's when mobile.
func viewport(width, height int64, mobile bool) chromedp.Action {
	if mobile {
		return chromedp.EmulateViewport(width, height, chromedp.EmulateMobile)
	}
	return chromedp.EmulateViewport(width, height)
}

// shot saves the page as NAME-WIDTH.png in dir.
func shot(b *browser, dir, name, width string) {
	b.screenshot(filepath.Join(dir, name+"-"+width+".png"))
}

// checkFits fails when the page is wider than the window: the body
// scrolls sideways (tables scroll inside their own box instead).
func checkFits(t *testing.T, b *browser, page, width string) {
	t.Helper()
	var over int
	b.run("page width", chromedp.Evaluate(`document.documentElement.scrollWidth - document.documentElement.clientWidth`, &over))
	if over > 1 {
		t.Errorf("%s at %s width: the page is %d px wider than the window", page, width, over)
	}
}

// checkOverview: the admin's overview shows the device count and the
// charts of the last hour.
func checkOverview(t *testing.T, b *browser, width string) {
	t.Helper()
	b.open("/console/")
	if got := b.text("#overview-devices"); got != "4" {
		t.Errorf("%s: the overview shows %q devices, want 4", width, got)
	}
	var charts int
	b.run("count charts", chromedp.Evaluate(`document.querySelectorAll("#overview-charts figure.chart").length`, &charts))
	if charts != 4 {
		t.Errorf("%s: %d charts on the overview, want 4", width, charts)
	}
	// Styled, a chart is a card of a few lines' height with a one-line
	// legend; unstyled it is a page-wide drawing with a bulleted list.
	var big []string
	b.run("chart sizes", chromedp.Evaluate(`Array.from(document.querySelectorAll("#overview-charts figure.chart")).
		filter(f => f.getBoundingClientRect().height > 320 || getComputedStyle(f.querySelector(".chart-legend")).listStyleType !== "none").map(f => f.id)`, &big))
	if len(big) > 0 {
		t.Errorf("%s: charts drawn without their style: %v", width, big)
	}
}

// checkDevicePage: the device page draws its telemetry's and reported
// properties' numbers as sparklines.
func checkDevicePage(t *testing.T, b *browser, path string) {
	t.Helper()
	b.open(path)
	var fields []string
	b.run("read sparklines", chromedp.Evaluate(`Array.from(document.querySelectorAll("#device-sparks tr")).filter(r => r.querySelector("svg polyline")).map(r => r.dataset.source + ":" + r.dataset.field)`, &fields))
	if got := strings.Join(fields, " "); got != "telemetry:env.hum telemetry:env.temp property:level" {
		t.Errorf("sparklines %q", got)
	}
}

// checkEventLines: each event is one line (a row no taller than two
// lines of text), and expanding one shows its data decoded.
func checkEventLines(t *testing.T, b *browser, path, width string) {
	t.Helper()
	b.open(path)
	var tall []string
	b.run("row heights", chromedp.Evaluate(`Array.from(document.querySelectorAll("#events-rows tr.event")).
		filter(r => r.getBoundingClientRect().height > 2 * parseFloat(getComputedStyle(r).lineHeight)).map(r => r.dataset.type + " " + Math.round(r.getBoundingClientRect().height) + "px")`, &tall))
	if len(tall) > 0 {
		t.Errorf("%s: event rows taller than a line: %v", width, tall)
	}
	var expanded string
	b.run("expand", chromedp.Evaluate(`(() => { const p = document.querySelector('#events-rows tr.event[data-type="device.up"] .event-payload'); p.closest("details").open = true; return p.checkVisibility() ? p.textContent : "(hidden)"; })()`, &expanded))
	if !strings.Contains(expanded, `"temp": `) {
		t.Errorf("%s: the expanded telemetry shows %q", width, expanded)
	}
}

// checkRadios: each radio button of the broadcast form sits on its
// label's line, just left of it.
func checkRadios(t *testing.T, b *browser, path string) {
	t.Helper()
	b.open(path)
	var bad []string
	b.run("radios", chromedp.Evaluate(`Array.from(document.querySelectorAll('#broadcast-form input[type=radio]')).map(r => {
		const l = document.querySelector('label[for="' + r.id + '"]').getBoundingClientRect(), rr = r.getBoundingClientRect();
		const ok = rr.width < 30 && rr.right <= l.left && l.left - rr.right < 20 && Math.abs((rr.top + rr.bottom) / 2 - (l.top + l.bottom) / 2) < 8;
		return ok ? "" : r.id + " at " + JSON.stringify([rr.left, rr.top, rr.width]) + ", label at " + JSON.stringify([l.left, l.top]);
	}).filter(s => s)`, &bad))
	if len(bad) > 0 {
		t.Errorf("radio buttons not beside their labels: %v", bad)
	}
}

// checkNamesUnbroken: on a phone, every device name in the page's
// tables is on one line.
func checkNamesUnbroken(t *testing.T, b *browser, path string) {
	t.Helper()
	b.open(path)
	var broken []string
	b.run("names", chromedp.Evaluate(`Array.from(document.querySelectorAll("#devices-table .device-link, td.msg-device a")).filter(a => a.getClientRects().length > 1).map(a => a.textContent)`, &broken))
	if len(broken) > 0 {
		t.Errorf("%s: device names broken across lines on a phone: %v", path, broken)
	}
}
