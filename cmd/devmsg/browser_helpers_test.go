package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium tab driven through chromedp.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the server's base URL
}

// chromiumPath finds Debian's chromium (CI installs it) or skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed (Debian package chromium; CI installs it)")
	return ""
}

// newBrowser starts a headless browser for base. On failure the test's
// last page is saved as failure.png under the test's temp dir.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,                               // CI runs the tests as root
		chromedp.Flag("ignore-certificate-errors", true), // the test server's own self-signed certificate
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, base: strings.TrimRight(base, "/")}
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			b.screenshot(filepath.Join(dir, "failure.png"))
			t.Logf("screenshot of the last page: %s", filepath.Join(dir, "failure.png"))
		}
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// run runs actions with a 20 s budget, failing the test on error.
func (b *browser) run(what string, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open navigates to a console path.
func (b *browser) open(path string) {
	b.t.Helper()
	b.run("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitReady("body", chromedp.ByQuery))
}

// text returns the visible text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery, chromedp.NodeVisible))
	return s
}

// body returns the page's visible text.
func (b *browser) body() string { return b.text("body") }

// waitText reloads path until the page shows want.
func (b *browser) waitText(path, want string, within time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		b.open(path)
		if strings.Contains(b.body(), want) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s never showed %q; it shows:\n%s", path, want, b.body())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// fill sets form fields by CSS selector and submits with the button.
func (b *browser) fill(fields map[string]string, submit string) {
	b.t.Helper()
	var actions []chromedp.Action
	for sel, v := range fields {
		actions = append(actions, chromedp.SetValue(sel, v, chromedp.ByQuery))
	}
	b.run("fill for "+submit, actions...)
	b.click(submit)
}

// click clicks a submit button and waits for the page the form leads to
// (POST, redirect, GET) to have loaded.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.Evaluate(`window.__devmsgOld = 1`, nil), chromedp.Click(sel, chromedp.ByQuery))
	// Evaluating while the page navigates fails; that is part of waiting.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var loaded bool
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		err := chromedp.Run(ctx, chromedp.Evaluate(`typeof window.__devmsgOld === "undefined" && document.readyState === "complete"`, &loaded))
		cancel()
		if err == nil && loaded {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("click %s: the next page did not load within 15s (last error: %v)", sel, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the full page as a PNG; errors are logged only.
func (b *browser) screenshot(path string) {
	var png []byte
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		b.t.Logf("screenshot %s: %v", path, err)
		return
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", path, err)
	}
}

// docShot saves a screenshot for docs/console.md when DEVMSG_SCREENSHOTS
// names a directory (`make screenshots` sets it to docs/img).
func (b *browser) docShot(name string) {
	if dir := os.Getenv("DEVMSG_SCREENSHOTS"); dir != "" {
		b.screenshot(filepath.Join(dir, name+".png"))
	}
}
