package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleMessagesBrowser checks in headless Chromium the recent
// messages list and its links, a long property value folded and unfolded,
// and the message box counting UTF-8 bytes: over 2048 the browser will
// not send, at 2048 it does.
func TestConsoleMessagesBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.createDevice("lamp-1")
	long := strings.Repeat("0123456789", 30)
	f.restOK("POST", "/device/v1/property", `{"seq_no":1,"device_name":"lamp-1","version":1,"properties":[{"name":"blob","value":"`+long+`"},{"name":"led","value":"on"}]}`, nil)
	f.seq.Store(1)
	first := f.send("lamp-1", "first", 60)
	failed := f.send("lamp-1", "to nobody", 0) // ttl 0, device offline: failed

	b := newBrowser(t, "http://"+f.s.addr)
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")

	// The list: newest first, with states, each row linking to its trace.
	list := "/console/apps/" + demoKey + "/messages"
	b.open(list)
	var ids []string
	b.run("read the rows", chromedp.Evaluate(`Array.from(document.querySelectorAll("#messages-table tr[data-msgid]")).map(r => r.dataset.msgid)`, &ids))
	if want := []string{fmt.Sprint(failed), fmt.Sprint(first)}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v", ids, want)
	}
	if st := b.text(fmt.Sprintf(`tr[data-msgid="%d"] .msg-state`, failed)); st != "failed" {
		t.Errorf("the ttl-0 message shows %q", st)
	}
	if st := b.text(fmt.Sprintf(`tr[data-msgid="%d"] .msg-state`, first)); st != "pending" {
		t.Errorf("the pending message shows %q", st)
	}
	b.docShot("messages")
	b.click(fmt.Sprintf(`tr[data-msgid="%d"] a.msg-link`, first))
	if st := b.text("#trace-state"); st != "pending" || !strings.Contains(b.text("#trace"), fmt.Sprint(first)) {
		t.Fatalf("the row's link led to state %q:\n%s", st, b.body())
	}

	// A long property value is folded until clicked.
	device := "/console/apps/" + demoKey + "/devices/lamp-1"
	b.open(device)
	cell := `#device-properties tr[data-property="blob"] .prop-desired`
	if s := b.text(cell); strings.Contains(s, long) || len(s) > 80 {
		t.Errorf("the long value is not folded: %q", s)
	}
	b.run("unfold", chromedp.Click(cell+" summary", chromedp.ByQuery))
	if s := b.text(cell + " .fold-full"); s != `"`+long+`"` {
		t.Errorf("unfolded value %q", s)
	}
	if s := b.text(`#device-properties tr[data-property="led"] .prop-desired`); s != `"on"` {
		t.Errorf("short value %q", s)
	}

	// 1025 two-byte letters are 1025 UTF-16 units but 2050 bytes: the box
	// says so and the browser does not send them.
	typeBody := func(js string) {
		b.run("type the message", chromedp.Evaluate(`(() => { const t = document.getElementById("device-message-body");
			t.value = `+js+`; t.dispatchEvent(new Event("input")); })()`, nil))
	}
	typeBody(`"é".repeat(1025)`)
	if s := b.text("#device-message-bytes"); s != "2050 / 2048 bytes" {
		t.Errorf("byte count %q, want 2050 / 2048 bytes", s)
	}
	var valid bool
	b.run("validity", chromedp.Evaluate(`document.getElementById("device-message-body").checkValidity()`, &valid))
	if valid {
		t.Error("2050 bytes pass the form's check")
	}
	b.run("submit over the limit", chromedp.Evaluate(`window.__stay = 1`, nil), chromedp.Click("#device-message-submit", chromedp.ByQuery))
	time.Sleep(500 * time.Millisecond) // a navigation, were there one, would have begun
	var stayed bool
	b.run("still on the page", chromedp.Evaluate(`window.__stay === 1 && document.getElementById("device-message-body").value.length === 1025`, &stayed))
	if !stayed {
		t.Fatal("the browser sent a message over 2048 bytes")
	}
	// Exactly 2048 bytes, with a line break counted as one: sent.
	typeBody(`"é".repeat(1023) + "\n" + "x"`)
	if s := b.text("#device-message-bytes"); s != "2048 / 2048 bytes" {
		t.Errorf("byte count %q, want 2048 / 2048 bytes", s)
	}
	b.click("#device-message-submit")
	if id := b.text("#device-message-msgid"); id == "" {
		t.Fatalf("2048 bytes were not sent:\n%s", b.body())
	}
}
