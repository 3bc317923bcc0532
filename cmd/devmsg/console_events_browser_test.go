package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleEventsBrowser checks in headless Chromium the live event
// view and the event webhook page: paho devices publish telemetry and the
// rows appear on top without a reload, a payload with a <script> tag is
// shown as text, the type and device filters keep only what they name,
// the device page leads to its own view, and a webhook (a real receiver
// answering the echostr) is added and deleted.
func TestConsoleEventsBrowser(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	s1 := f.createDevice("sensor-1")
	s2 := f.createDevice("sensor-2")
	d1, d2 := f.mustConnect("sensor-1", s1), f.mustConnect("sensor-2", s2)
	publish := func(d *device, topic, payload string) {
		t.Helper()
		tok := d.c.Publish(d.prefix+topic, 1, false, payload)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("%s publish %s: %v", d.name, topic, tok.Error())
		}
	}

	b := newBrowser(t, "http://"+f.s.addr)
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")
	events := "/console/apps/" + demoKey + "/events"
	b.open(events)
	b.waitLive()
	b.run("mark the page", chromedp.Evaluate(`window.__samePage = 1`, nil))

	// Telemetry appears on top as it is PUBACKed, without a reload.
	publish(d1, "up/temp", `{"celsius":21.5}`)
	b.waitRows(`r => r.dataset.type === "device.up" && r.dataset.device === "sensor-1"`, 1)
	publish(d2, "up", `<script>window.__pwned = 1</script>`)
	top := b.waitRows(`r => r.dataset.device === "sensor-2"`, 1)[0]
	var first string
	b.run("top row", chromedp.Evaluate(`document.querySelector("#events-rows tr").dataset.id`, &first))
	if first != top {
		t.Errorf("the newest event %s is not on top (%s is)", top, first)
	}
	if s := b.text(`#events-rows tr[data-id="` + top + `"] .event-data`); !strings.Contains(s, `<script>window.__pwned = 1</script>`) {
		t.Errorf("the payload is not shown as text: %q", s)
	}
	var safe bool
	b.run("no script ran", chromedp.Evaluate(`window.__samePage === 1 && window.__pwned === undefined && document.querySelectorAll("#events-rows script").length === 0`, &safe))
	if !safe {
		t.Fatal("the page reloaded, or the device's payload became markup")
	}
	b.docShot("events")

	// Filter: device.up of sensor-2 only.
	b.run("tick device.up", chromedp.Click(`#events-filter input[value="device.up"]`, chromedp.ByQuery))
	b.fill(map[string]string{"#events-device": "sensor-2"}, "#events-filter-submit")
	b.waitLive()
	publish(d1, "up/temp", `{"celsius":22}`)
	publish(d2, "event", `{"name":"door","content":"open","type":1}`)
	publish(d2, "up/humidity", `{"rh":40}`)
	b.waitRows(`r => r.dataset.type === "device.up"`, 1)
	var shown []string
	b.run("read the rows", chromedp.Evaluate(`Array.from(document.querySelectorAll("#events-rows tr.event")).map(r => r.dataset.type + " " + r.dataset.device)`, &shown))
	if len(shown) != 1 || shown[0] != "device.up sensor-2" {
		t.Fatalf("the filtered view shows %v, want only sensor-2's device.up", shown)
	}
	if s := b.text(`#events-rows tr.event .event-data`); !strings.Contains(s, "up/humidity") {
		t.Errorf("the filtered row is not the humidity reading: %q", s)
	}

	// From the device page to its own view: its event report shows.
	b.open("/console/apps/" + demoKey + "/devices/sensor-2")
	b.click("#device-events-link")
	b.waitLive()
	if name := b.text("#events-device-name"); name != "sensor-2" {
		t.Errorf("the device's view is of %q", name)
	}
	publish(d2, "event", `{"name":"door","content":"closed","type":0}`)
	b.waitRows(`r => r.dataset.type === "device.event"`, 1)
	if s := b.text(`#events-rows tr.event .event-data`); !strings.Contains(s, `"closed"`) || !strings.Contains(s, `"report_seq"`) {
		t.Errorf("the event report reads %q", s)
	}

	// Webhooks: add one that a real receiver verifies, then delete it.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("echostr"))
	}))
	defer echo.Close()
	b.open("/console/apps/" + demoKey + "/webhooks")
	b.run("tick device.event", chromedp.Click(`#webhook-add input[value="device.event"]`, chromedp.ByQuery))
	b.run("choose jiot", chromedp.SetValue("#webhook-add-format", "jiot", chromedp.ByQuery))
	b.fill(map[string]string{"#webhook-add-url": echo.URL + "/jiot"}, "#webhook-add-submit")
	if msg := b.text("#flash-message"); !strings.Contains(msg, "Verified and added") {
		t.Fatalf("adding the webhook: %q", msg)
	}
	row := b.text(`#webhooks-table tr[data-url="` + echo.URL + `/jiot"]`)
	if !strings.Contains(row, "device.event") || !strings.Contains(row, "jiot") {
		t.Errorf("the webhook row reads %q", row)
	}
	b.docShot("webhooks")
	b.fill(map[string]string{"#webhook-add-url": "http://127.0.0.1:1/nobody"}, "#webhook-add-submit")
	if msg := b.text("#flash-message"); !strings.Contains(msg, "127.0.0.1:1") {
		t.Errorf("a URL that does not answer: %q", msg)
	}
	b.click("#webhook-0-delete")
	if msg := b.text("#flash-message"); !strings.Contains(msg, "Deleted") || !strings.Contains(b.body(), "No event webhook") {
		t.Errorf("after deleting: %q\n%s", msg, b.body())
	}

	// A refusal a retry would not change stops the view and says why.
	b.open(events + "?device=ab")
	b.run("wait for the refusal", chromedp.WaitVisible(`#events-status.warn`, chromedp.ByQuery))
	if s := b.text("#events-status"); !strings.Contains(s, "stopped") || !strings.Contains(s, "device_name") {
		t.Errorf("a bad device filter: %q", s)
	}

	// A stream the server ends (here a pull over the app's query rate
	// limit of 1 a second) is reopened by the browser with Last-Event-ID:
	// it goes on where it was, nothing shown twice.
	f.restOK("PUT", "/admin/v1/apps/"+demoKey+"/ratelimits", `{"query":1}`, nil)
	b.open(events + "?device=sensor-1")
	b.waitLive()
	b.run("count reconnects", chromedp.Evaluate(`(() => { window.__lost = 0; const s = document.getElementById("events-status");
		new MutationObserver(() => { if (s.textContent.startsWith("Connection lost")) window.__lost++; }).observe(s, {childList: true, characterData: true, subtree: true}); })()`, nil))
	publish(d1, "up/a", "1")
	publish(d1, "up/b", "2")
	b.waitRows(`r => true`, 2)
	time.Sleep(4 * time.Second) // the refused pull after them ended the stream; the browser reconnects after 3 s
	b.waitLive()
	publish(d1, "up/c", "3")
	b.waitRows(`r => r.querySelector(".event-data").textContent.includes("up/c")`, 1)
	var lost int
	var got []string
	b.run("read the rows", chromedp.Evaluate(`window.__lost`, &lost),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#events-rows tr.event")).map(r => r.querySelector(".event-topic").textContent)`, &got))
	if lost == 0 {
		t.Error("the stream was never reopened: the test proves nothing")
	}
	if strings.Join(got, " ") != "up/c up/b up/a" {
		t.Errorf("after a reconnect the view shows %v, want up/c up/b up/a", got)
	}
}

// waitLive waits until the live view's stream is open.
func (b *browser) waitLive() {
	b.t.Helper()
	b.run("wait for the stream", chromedp.WaitVisible(`#events-table[data-live="1"]`, chromedp.ByQuery))
}

// waitRows waits until at least n event rows pass the JavaScript
// predicate match (a function of the row) and returns their ids, top
// first.
func (b *browser) waitRows(match string, n int) []string {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ids []string
		b.run("read rows", chromedp.Evaluate(fmt.Sprintf(`Array.from(document.querySelectorAll("#events-rows tr.event")).filter(%s).map(r => r.dataset.id)`, match), &ids))
		if len(ids) >= n {
			return ids
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("no %d rows matching %s within 10s:\n%s", n, match, b.body())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsoleEventStreamShutdown: an open live-view stream ends as the
// server shuts down, so shutdown waits for real requests only (without
// it, Close fails after its 30 s budget).
func TestConsoleEventStreamShutdown(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Jar: jar}
	base := "http://" + f.s.addr
	resp, err := cl.Get(base + "/console/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf token on the sign-in page:\n%s", page)
	}
	resp, err = cl.PostForm(base+"/console/login", url.Values{"csrf": {string(m[1])}, "mode": {"admin"}, "username": {"admin"}, "password": {"pw"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = cl.Get(base + "/console/apps/" + demoKey + "/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	f.s.stop(t) // fails the test if Close reports an unfinished shutdown
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Logf("the stream ended with %v", err)
	}
}
