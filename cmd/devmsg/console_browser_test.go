package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// TestConsoleBrowser walks through the console in headless Chromium the
// way an operator and an app owner would: sign in both ways, create an
// app, define a property, batch-create devices, watch a simulated device
// come online and report a desired value, trace a message to
// "delivered", add a passing and a failing callback URL, switch callbacks
// on, see a delivery and a dead letter, redeliver it, and check that an
// app owner cannot reach another app.
func TestConsoleBrowser(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	b := newBrowser(t, "http://"+f.s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	consoleSignInAdmin(t, b)
	key, secret := consoleCreateApp(t, b)
	app := "/console/apps/" + key
	consoleDefineProperty(t, b, app)
	lampSecret := consoleCreateDevices(t, b, app)

	// A simulated device connects; it reports each desired value back.
	d := connectEchoingDevice(ctx, t, f, key, "lamp-0001", lampSecret)
	defer d.Close()
	device := app + "/devices/lamp-0001"
	b.waitText(device, "online", 10*time.Second)
	if st := b.text("#device-status"); st != "online" {
		t.Fatalf("device status %q", st)
	}

	consoleSetDesired(t, b, device)
	consoleTraceMessage(t, b, app)
	rcv := newReceiver(t)
	callbacks := app + "/callbacks"
	consoleCallbackURLs(t, b, callbacks, rcv)
	consoleDeliveriesAndDeadLetters(t, b, f, callbacks, rcv, key, secret)

	b.open("/console/")
	b.docShot("overview")

	consoleAppOwner(t, b, key, secret, device)
}

// consoleSignInAdmin signs in as the admin.
func consoleSignInAdmin(t *testing.T, b *browser) {
	t.Helper()
	b.open("/console/login")
	b.docShot("login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")
	if who := b.text("#whoami"); !strings.Contains(who, "admin") {
		t.Fatalf("signed in as %q, want admin", who)
	}
}

// consoleCreateApp creates an app and returns its key and master secret,
// which are shown once.
func consoleCreateApp(t *testing.T, b *browser) (key, secret string) {
	t.Helper()
	b.open("/console/apps")
	b.fill(map[string]string{"#app-create-name": "console-app"}, "#app-create-submit")
	key, secret = b.text("#app-created-key"), b.text("#app-created-secret")
	if key == "" || len(secret) != 32 {
		t.Fatalf("created app key %q secret %q", key, secret)
	}
	return key, secret
}

// consoleDefineProperty defines the string property led in the app's
// model.
func consoleDefineProperty(t *testing.T, b *browser, app string) {
	t.Helper()
	b.open(app)
	b.fill(map[string]string{"#property-add-name": "led", "#property-add-type": "string", "#property-add-max-length": "8"}, "#property-add-submit")
	if !strings.Contains(b.text(`#properties-table tr[data-property="led"]`), "string") {
		t.Fatalf("property model after adding led:\n%s", b.body())
	}
	b.docShot("app")
}

// consoleCreateDevices batch-creates devices from a pasted list, one name
// of it invalid, and returns lamp-0001's secret.
func consoleCreateDevices(t *testing.T, b *browser, app string) string {
	t.Helper()
	b.open(app + "/devices")
	b.fill(map[string]string{"#devices-create-list": "lamp-0001\nlamp-0002,hall\nx"}, "#devices-create-submit")
	lampSecret := b.text(`#devices-create-results tr[data-device="lamp-0001"] .result-secret`)
	if len(lampSecret) != 32 {
		t.Fatalf("no secret for lamp-0001:\n%s", b.body())
	}
	if msg := b.text(`#devices-create-results tr[data-code="1003"] .result-message`); !strings.Contains(msg, "name") {
		t.Errorf("the invalid name x: %q", msg)
	}
	b.open(app + "/devices?prefix=lamp-")
	if body := b.text("#devices-table"); !strings.Contains(body, "lamp-0001") || !strings.Contains(body, "lamp-0002") {
		t.Fatalf("device list:\n%s", body)
	}
	b.docShot("devices")
	return lampSecret
}

// connectEchoingDevice connects a device through the SDK that reports
// every desired led value back.
func connectEchoingDevice(ctx context.Context, t *testing.T, f *fleet, key, name, secret string) *sdk.Device {
	t.Helper()
	var d *sdk.Device
	d, err := sdk.Connect(ctx, sdk.Config{
		Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: key, DeviceName: name, DeviceSecret: secret,
		SDKVersion: "sdk-console", AppVersion: "3",
		OnDesired: func(doc sdk.Desired) {
			if v, ok := doc.Properties["led"]; ok {
				var led string
				_ = json.Unmarshal(v, &led)
				_, _ = d.Report(ctx, map[string]any{"led": led}, 0)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// consoleSetDesired sets a desired property and sees the reported value
// come back.
func consoleSetDesired(t *testing.T, b *browser, device string) {
	t.Helper()
	b.fill(map[string]string{"#device-property-name": "led", "#device-property-value": "on"}, "#device-property-submit")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.text(`#device-properties tr[data-property="led"] .prop-reported`), "on") {
		if time.Now().After(deadline) {
			t.Fatalf("reported value never shown:\n%s", b.body())
		}
		time.Sleep(300 * time.Millisecond)
		b.open(device)
	}
	b.docShot("device")
}

// consoleTraceMessage sends a message from the device page and traces it
// to "delivered".
func consoleTraceMessage(t *testing.T, b *browser, app string) {
	t.Helper()
	b.fill(map[string]string{"#device-message-body": "hello from the console", "#device-message-ttl": "600"}, "#device-message-submit")
	msgid := b.text("#device-message-msgid")
	if _, err := strconv.ParseInt(msgid, 10, 64); err != nil {
		t.Fatalf("msgid %q:\n%s", msgid, b.body())
	}
	trace := app + "/messages?msgid=" + msgid
	b.waitText(trace, "delivered", 10*time.Second)
	if st := b.text("#trace-state"); st != "delivered" {
		t.Fatalf("trace state %q", st)
	}
	b.docShot("trace")
}

// consoleCallbackURLs adds two callback URLs: rcv's passes verification,
// one that answers the wrong body is refused.
func consoleCallbackURLs(t *testing.T, b *browser, callbacks string, rcv *receiver) {
	t.Helper()
	wrong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "not the echostr") }))
	defer wrong.Close()
	b.open(callbacks)
	b.fill(map[string]string{"#callback-url-add-url": rcv.url("/console")}, "#callback-url-add-submit")
	if !strings.Contains(b.body(), rcv.url("/console")) {
		t.Fatalf("the passing URL is not listed:\n%s", b.body())
	}
	b.fill(map[string]string{"#callback-url-add-url": wrong.URL + "/cb"}, "#callback-url-add-submit")
	if msg := b.text("#flash-message"); !strings.Contains(msg, "verification failed") {
		t.Fatalf("failing URL: flash %q", msg)
	}
	if strings.Contains(b.body(), wrong.URL+"/cb\n") {
		t.Fatal("the failing URL was added")
	}
}

// consoleDeliveriesAndDeadLetters switches callbacks on and sees a
// message's records shown as a delivery; then the receiver fails, the
// batch becomes a dead letter after its retries, and the console
// redelivers it once the receiver works again.
func consoleDeliveriesAndDeadLetters(t *testing.T, b *browser, f *fleet, callbacks string, rcv *receiver, key, secret string) {
	t.Helper()
	b.click("#callback-switch-submit")
	if st := b.text("#callback-state"); st != "on" {
		t.Fatalf("callback switch %q after toggling", st)
	}
	id := f.sendAs(key, secret, "lamp-0001", "with callbacks")
	waitFor(t, 10*time.Second, "records at the receiver", func() bool { return len(rcv.ofMessage(id)) >= 3 })
	b.waitText(callbacks, "200", 5*time.Second)
	if !strings.Contains(b.text("#callback-deliveries"), "200") {
		t.Fatalf("no delivery shown:\n%s", b.body())
	}

	rcv.status.Store(500)
	failed := f.sendAs(key, secret, "lamp-0002", "to an offline device")
	deadline := time.Now().Add(15 * time.Second)
	for {
		b.open(callbacks)
		var n int
		b.run("count dead letters", chromedp.Evaluate(`document.querySelectorAll("#callback-deadletters tr[data-id]").length`, &n))
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter shown:\n%s", b.body())
		}
		time.Sleep(300 * time.Millisecond)
	}
	b.docShot("callbacks")
	rcv.status.Store(200)
	before := len(rcv.ofMessage(failed))
	b.click("#callback-deadletters .deadletter-redeliver")
	waitFor(t, 10*time.Second, "redelivered records", func() bool { return len(rcv.ofMessage(failed)) > before })
}

// consoleAppOwner signs out, then signs in as the app's owner: its own
// pages work, another app's are not found.
func consoleAppOwner(t *testing.T, b *browser, key, secret, device string) {
	t.Helper()
	b.click("#logout-submit")
	b.open("/console/login")
	b.fill(map[string]string{"#login-app-key": key, "#login-app-secret": secret}, "#login-app-submit")
	if who := b.text("#whoami"); !strings.Contains(who, key) && !strings.Contains(who, "console-app") {
		t.Fatalf("signed in as %q, want the app", who)
	}
	b.open(device)
	if st := b.text("#device-status"); st != "online" {
		t.Fatalf("the owner's device page: status %q", st)
	}
	b.open("/console/apps/" + demoKey + "/devices")
	if !strings.Contains(b.text("#error-page"), "404") && !strings.Contains(strings.ToLower(b.text("#error-page")), "not found") {
		t.Fatalf("an app owner reached another app's devices:\n%s", b.body())
	}
	if strings.Contains(b.body(), demoKey) && strings.Contains(b.body(), "devices-table") {
		t.Fatal("another app's devices are shown")
	}
}

// sendAs sends a message with an app's own credentials and returns its msgid.
func (f *fleet) sendAs(key, secret, device, body string) int64 {
	f.t.Helper()
	st, b := f.restAs(key, secret, "POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q}`, f.seq.Add(1), device, body))
	var r struct{ Msgid int64 }
	if st != 200 || json.Unmarshal(b, &r) != nil {
		f.t.Fatalf("send: %d %s", st, b)
	}
	return r.Msgid
}
