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

// TestConsoleCommandsBrowser checks in headless Chromium a device page's
// command form and its recent commands: a ping answered within the
// form's wait, a failing command, one sent from the API that shows once
// it ends, and a slow one whose answer appears in the list by itself
// (the list refreshes while a command is open).
func TestConsoleCommandsBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("robot-1")
	release := make(chan struct{})
	cfg := sdk.Config{Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: "robot-1", DeviceSecret: secret}
	cfg.OnCommand("ping", func(_ context.Context, cmd *sdk.Command) sdk.Answer { return sdk.Answer{Result: cmd.Params} })
	cfg.OnCommand("fail", func(context.Context, *sdk.Command) sdk.Answer { return sdk.Answer{Code: 7, Message: "out of paper"} })
	cfg.OnCommand("slow", func(ctx context.Context, cmd *sdk.Command) sdk.Answer {
		_ = cmd.Progress(ctx, 40, nil)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return sdk.Answer{Result: "done slowly"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := sdk.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A command from the backend, not the console.
	f.seq.Store(100)
	fromAPI := f.sendCmd("robot-1", "ping", `"from the api"`, 10)

	b := newBrowser(t, "http://"+f.s.addr)
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": "pw"}, "#login-admin-submit")
	page := "/console/apps/" + demoKey + "/devices/robot-1"
	b.open(page)
	row := func(id int64, cell string) string {
		return fmt.Sprintf(`#device-commands tr[data-cmd-id="%d"] .%s`, id, cell)
	}
	if s := b.text(row(fromAPI.CmdID, "cmd-state")); s != "succeeded" {
		t.Fatalf("the API's command shows %q:\n%s", s, b.text("#device-commands"))
	}

	b.fill(map[string]string{"#device-command-name": "ping", "#device-command-params": `{"hello":"console"}`}, "#device-command-submit")
	if s := b.text("#flash-message"); !strings.Contains(s, "(ping): succeeded.") {
		t.Fatalf("flash after ping: %q", s)
	}
	first := newestCommandRow(b)
	if s := b.text(row(first, "cmd-result")); s != `{"hello":"console"}` {
		t.Errorf("ping's result shows %q", s)
	}

	b.fill(map[string]string{"#device-command-name": "fail"}, "#device-command-submit")
	failed := newestCommandRow(b)
	if st, code, msg := b.text(row(failed, "cmd-state")), b.text(row(failed, "cmd-code")), b.text(row(failed, "cmd-message")); st != "failed" || code != "7" || msg != "out of paper" {
		t.Errorf("fail shows %q %q %q", st, code, msg)
	}

	// Params that are not JSON are refused before anything is sent.
	b.fill(map[string]string{"#device-command-name": "ping", "#device-command-params": "{not json"}, "#device-command-submit")
	if s := b.text("#flash-message"); !strings.Contains(s, "Params must be JSON") {
		t.Errorf("flash after bad params: %q", s)
	}

	// A slow command: the form returns before the answer, the list shows
	// it in progress, and then its answer, without a reload.
	b.fill(map[string]string{"#device-command-name": "slow", "#device-command-wait": "1"}, "#device-command-submit")
	slow := newestCommandRow(b)
	if s := liveSel(b, row(slow, "cmd-state")); s != "in_progress" && s != "delivered" && s != "sent" {
		t.Fatalf("the slow command shows %q", s)
	}
	b.docShot("device-commands")
	close(release)
	// The list is replaced in place every second: each read is one
	// evaluation, never a node found and then read.
	deadline := time.Now().Add(15 * time.Second)
	for liveSel(b, row(slow, "cmd-state")) != "succeeded" {
		if time.Now().After(deadline) {
			t.Fatalf("the slow command's answer never showed: %s", liveSel(b, "#device-commands"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := liveSel(b, row(slow, "cmd-result")); s != `"done slowly"` {
		t.Errorf("the slow command's result shows %q", s)
	}
}

// liveSel returns the trimmed text of the first element matching sel,
// "" when there is none, read in one evaluation.
func liveSel(b *browser, sel string) string {
	b.t.Helper()
	var s string
	b.run("read "+sel, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").trim()`, sel), &s))
	return s
}

// newestCommandRow returns the cmd_id of the first row of the device
// page's commands.
func newestCommandRow(b *browser) int64 {
	b.t.Helper()
	var id int64
	b.run("read the newest command", chromedp.Evaluate(`+document.querySelector("#device-commands tr[data-cmd-id]").dataset.cmdId`, &id))
	return id
}
