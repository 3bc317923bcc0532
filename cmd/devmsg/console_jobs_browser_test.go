package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// TestConsoleJobsBrowser runs jobs from the console in headless
// Chromium against the whole program: an invalid form shows the API's
// message; a slow job on a tag is paused, resumed and cancelled from its
// page; and a fast one on a tag with two devices online (one answering
// success, one failure) and one offline ends by itself on the open page,
// its executions showing each device's command, state and code, each
// command a link to it on its device's page.
func TestConsoleJobsBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.restOK("POST", "/device/v1/devices", `{"device":[{"name":"lamp-a","tags":["lamp"]},{"name":"lamp-b","tags":["lamp"]},{"name":"lamp-c","tags":["lamp"]}]}`, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, code := range map[string]int{"lamp-a": 0, "lamp-b": 9} {
		var info struct {
			DeviceSecret string `json:"device_secret"`
		}
		f.restOK("GET", "/device/v1/baseinfo?device_name="+name, "", &info)
		cfg := sdk.Config{Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: name, DeviceSecret: info.DeviceSecret}
		cfg.OnCommand("reboot", func(context.Context, *sdk.Command) sdk.Answer {
			if code != 0 {
				return sdk.Answer{Code: code, Message: "busy"}
			}
			return sdk.Answer{Result: "rebooted"}
		})
		d, err := sdk.Connect(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
	}

	b := newBrowser(t, "http://"+f.s.addr)
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")
	b.open("/console/apps/" + demoKey)
	b.click("#nav-jobs")

	b.fill(map[string]string{"#job-tag": "lamp", "#job-name": "reboot", "#job-rate": "0"}, "#job-submit")
	if s := liveSel(b, "#job-create-error"); !strings.Contains(s, "rollout.rate must be 1 to 1000000") {
		t.Fatalf("error beside the form: %q", s)
	}

	// Slow: one command a minute, so it is still running while we act.
	b.fill(map[string]string{"#job-rate": "1", "#job-ttl": "60"}, "#job-submit")
	if s := liveSel(b, "#job-targets"); s != "3" {
		t.Fatalf("targets %q", s)
	}
	waitFor(t, 15*time.Second, "running", func() bool { return liveSel(b, "#job-state") == "running" })
	b.click("#job-pause-submit")
	waitFor(t, 15*time.Second, "paused", func() bool { return liveSel(b, "#job-state") == "paused" })
	b.click("#job-resume-submit")
	waitFor(t, 15*time.Second, "running again", func() bool { return liveSel(b, "#job-state") == "running" })
	b.click("#job-cancel-submit")
	waitFor(t, 15*time.Second, "cancelled", func() bool { return liveSel(b, "#job-state") == "cancelled" })

	// Fast: it ends by itself while the page is open.
	b.click("#job-back")
	b.fill(map[string]string{"#job-tag": "lamp", "#job-name": "reboot", "#job-rate": "600", "#job-ttl": "0"}, "#job-submit")
	waitFor(t, 30*time.Second, "the job done on the page", func() bool { return liveSel(b, "#job-state") == "done" })
	row := func(device, cell string) string {
		return liveSel(b, fmt.Sprintf(`#job-execs tr[data-device=%q] .%s`, device, cell))
	}
	waitFor(t, 15*time.Second, "every execution ended in the table", func() bool {
		return row("lamp-a", "exec-state") == "succeeded" && row("lamp-b", "exec-state") == "failed" && row("lamp-c", "exec-state") == "offline"
	})
	if c := row("lamp-b", "exec-code"); c != "9" {
		t.Errorf("lamp-b's code %q", c)
	}
	if id := row("lamp-a", "exec-cmd"); id == "" || id == "—" {
		t.Errorf("lamp-a's cmd_id %q", id)
	}
	var counts string
	b.run("counts", chromedp.Evaluate(`["succeeded","failed","offline"].map(s => (document.getElementById("job-count-" + s) || {}).textContent).join(",")`, &counts))
	if counts != "1,1,1" {
		t.Errorf("counts succeeded,failed,offline %q", counts)
	}
	b.docShot("job")

	// A cmd_id opens the device's page at that command.
	failedCmd := row("lamp-b", "exec-cmd")
	b.click(`#job-execs tr[data-device="lamp-b"] .exec-cmd a`)
	if s := liveSel(b, "#cmd-"+failedCmd+" .cmd-state"); s != "failed" {
		t.Errorf("lamp-b's page shows command %s as %q", failedCmd, s)
	}
	var hash string
	b.run("hash", chromedp.Evaluate(`location.pathname + location.hash`, &hash))
	if hash != "/console/apps/"+demoKey+"/devices/lamp-b#cmd-"+failedCmd {
		t.Errorf("the cmd_id link led to %s", hash)
	}
}
