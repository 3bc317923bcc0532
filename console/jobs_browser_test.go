package console

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/devmsg/devmsg/internal/browsertest"
)

// chrome is a headless Chromium tab on an env's server
// (browsertest.Tab).
type chrome struct {
	*browsertest.Tab
	t *testing.T
}

// newChrome starts headless Chromium (skipped when it is not
// installed); see browsertest.New.
func newChrome(t *testing.T, base string) *chrome {
	t.Helper()
	return &chrome{Tab: browsertest.New(t, base), t: t}
}

func (b *chrome) run(what string, actions ...chromedp.Action) { b.t.Helper(); b.Run(what, actions...) }
func (b *chrome) open(path string)                            { b.t.Helper(); b.Open(path) }
func (b *chrome) read(sel string) string                      { b.t.Helper(); return b.Read(sel) }
func (b *chrome) eval(js string, out any)                     { b.t.Helper(); b.Eval(js, out) }
func (b *chrome) screenshot(path string)                      { b.Screenshot(path) }

// click clicks a button in one evaluation (it may sit in a live
// section) and waits for the next page to load.
func (b *chrome) click(sel string) { b.t.Helper(); b.ClickNow(sel) }

// submit sets form fields and clicks the button, waiting for the page
// the form leads to (POST, redirect, GET).
func (b *chrome) submit(fields map[string]string, button string) {
	b.t.Helper()
	b.Fill(fields, button, b.ClickNow)
}

// waitRead waits until sel reads want, without reloading the page.
func (b *chrome) waitRead(sel, want string, within time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := b.read(sel)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s reads %q, not %q, after %v", sel, got, want, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestJobsBrowser walks the jobs pages in headless Chromium as an app
// owner: an invalid form shows the API's message beside it, filled in
// as sent; a job on a tag opens its page with its targets and its
// executions; pause, resume and cancel change its state; and a change
// made through the API shows on the open page without a reload.
func TestJobsBrowser(t *testing.T) {
	e := newJobsEnv(t)
	a := e.createApp("fleet")
	e.createTagged(a, "lamp", "lamp-a", "lamp-b", "lamp-c")
	e.createTagged(a, "fan", "fan-a")
	b := newChrome(t, e.srv.URL)
	b.open("/console/login")
	b.submit(map[string]string{"#login-app-key": a.Key, "#login-app-secret": a.Secret}, "#login-app-submit")
	b.click("#nav-jobs")
	if s := b.read("h1"); s != "Jobs" {
		t.Fatalf("the app's Jobs link led to %q", s)
	}

	// Refused by the API: its message, beside the form, which keeps what
	// was typed.
	b.submit(map[string]string{"#job-tag": "lamp", "#job-name": "reboot", "#job-params": `{"delay_s":5}`,
		"#job-rate": "0", "#job-timeout": "20"}, "#job-submit")
	if s := b.read("#job-create-error"); !strings.Contains(s, "rollout.rate must be 1 to 1000000") {
		t.Fatalf("error beside the form: %q", s)
	}
	var name, params string
	b.eval(`document.getElementById("job-name").value`, &name)
	b.eval(`document.getElementById("job-params").value`, &params)
	if name != "reboot" || params != `{"delay_s":5}` {
		t.Errorf("the form came back with name %q params %q", name, params)
	}

	// One command a minute: the job stays running while we look.
	b.submit(map[string]string{"#job-rate": "1", "#job-ttl": "60"}, "#job-submit")
	if s := b.read("#flash-message"); !strings.Contains(s, "accepted for 3 devices") {
		t.Fatalf("flash after create: %q", s)
	}
	id := b.read("#job-id")
	if b.read("#job-state") != "running" || b.read("#job-targets") != "3" {
		t.Fatalf("job %s: state %q targets %q", id, b.read("#job-state"), b.read("#job-targets"))
	}
	var devices []string
	b.eval(`[...document.querySelectorAll("#job-execs tr[data-device]")].map(r => r.dataset.device)`, &devices)
	if strings.Join(devices, ",") != "lamp-a,lamp-b,lamp-c" {
		t.Errorf("executions list %v", devices)
	}
	var live string
	b.eval(`document.getElementById("job-progress").getAttribute("data-live")`, &live)
	if live != "2" {
		t.Errorf("the progress of a running job is not live: data-live=%q", live)
	}
	b.screenshot(filepath.Join(t.TempDir(), "job.png"))
	if dir := os.Getenv("DEVMSG_SHOTS"); dir != "" {
		b.screenshot(filepath.Join(dir, "job-desktop.png"))
	}

	// The chart of executions over time draws as the page refreshes.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var lines int
		b.eval(`document.querySelectorAll("#job-chart polyline.chart-line").length`, &lines)
		if lines == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's chart has %d lines: %s", lines, b.read("#job-chart"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if dir := os.Getenv("DEVMSG_SHOTS"); dir != "" {
		b.screenshot(filepath.Join(dir, "job-chart-desktop.png"))
	}

	b.click("#job-pause-submit")
	b.waitRead("#job-state", "paused", 5*time.Second)
	b.click("#job-resume-submit")
	b.waitRead("#job-state", "running", 5*time.Second)

	// Paused through the API: the open page follows by itself.
	b.eval(`window.__devmsgStay = 1`, nil)
	e.apiCall(a.Key, a.Secret, "POST", "/job/v1/job/pause", map[string]any{"job_id": json64(id)}, nil)
	b.waitRead("#job-state", "paused", 15*time.Second)
	var stayed bool
	b.eval(`typeof window.__devmsgStay !== "undefined"`, &stayed)
	if !stayed {
		t.Error("the page reloaded instead of refreshing its progress in place")
	}
	// The buttons came with the refreshed section.
	b.click("#job-cancel-submit")
	b.waitRead("#job-state", "cancelled", 5*time.Second)
	if s := b.read("#job-pause-submit") + b.read("#job-resume-submit") + b.read("#job-cancel-submit"); s != "" {
		t.Errorf("a cancelled job offers %q", s)
	}

	// The list shows it.
	b.click("#job-back")
	if s := b.read(`#jobs-table tr[data-job-id="` + id + `"] .job-state`); s != "cancelled" {
		t.Errorf("the list shows job %s as %q", id, s)
	}
	if dir := os.Getenv("DEVMSG_SHOTS"); dir != "" {
		b.screenshot(filepath.Join(dir, "jobs-desktop.png"))
	}

	// On a phone neither page is wider than the screen: tables scroll in
	// their own box.
	b.run("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, p := range []struct{ name, path string }{{"jobs", "/console/apps/" + a.Key + "/jobs"}, {"job", "/console/apps/" + a.Key + "/jobs/" + id}} {
		b.open(p.path)
		var over int
		b.eval(`document.documentElement.scrollWidth - document.documentElement.clientWidth`, &over)
		if over > 1 {
			t.Errorf("the %s page is %d px wider than a phone", p.name, over)
		}
		if dir := os.Getenv("DEVMSG_SHOTS"); dir != "" {
			b.screenshot(filepath.Join(dir, p.name+"-phone.png"))
		}
	}
}

// json64 is a decimal id as a JSON number.
func json64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
