// Package browsertest drives a headless Chromium tab through chromedp
// for the console's tests, in package console and in cmd/devmsg's
// whole-program tests. It is for tests only.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Tab is a headless Chromium tab on a server whose base URL is Base.
type Tab struct {
	T    *testing.T
	Ctx  context.Context
	Base string
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

// New starts headless Chromium for base, stopped when the test ends. On
// failure the test's last page is saved as failure.png under the test's
// temp dir.
func New(t *testing.T, base string) *Tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,                               // CI runs the tests as root
		chromedp.Flag("ignore-certificate-errors", true), // the test server's own self-signed certificate
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Tab{T: t, Ctx: ctx, Base: strings.TrimRight(base, "/")}
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			b.Screenshot(filepath.Join(dir, "failure.png"))
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

// Run runs actions with a 20 s budget, failing the test on error.
func (b *Tab) Run(what string, actions ...chromedp.Action) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
}

// Open navigates to a path of the server. Chromium aborts a page load
// with net::ERR_NETWORK_CHANGED when the machine's network interfaces
// change, as when a container starts (the compose test, which go test may
// run beside these), so such a load is tried again, up to three times.
func (b *Tab) Open(path string) {
	b.T.Helper()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
		err := chromedp.Run(ctx, chromedp.Navigate(b.Base+path), chromedp.WaitReady("body", chromedp.ByQuery))
		cancel()
		switch {
		case err == nil:
			return
		case attempt < 3 && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED"):
			b.T.Logf("open %s: %v; again", path, err)
		default:
			b.T.Fatalf("open %s: %v", path, err)
		}
	}
}

// Text returns the visible text of the first element matching sel,
// waiting for it to be visible.
func (b *Tab) Text(sel string) string {
	b.T.Helper()
	var s string
	b.Run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery, chromedp.NodeVisible))
	return s
}

// Read returns the trimmed text of the first element matching sel, ""
// when there is none, in one evaluation: a live section is replaced
// every 2 s, so a node found by one call may be gone by the next.
func (b *Tab) Read(sel string) string {
	b.T.Helper()
	var s string
	b.Run("read "+sel, chromedp.Evaluate(`(document.querySelector(`+strconv.Quote(sel)+`)?.textContent ?? "").trim()`, &s))
	return s
}

// Eval evaluates js into out.
func (b *Tab) Eval(js string, out any) {
	b.T.Helper()
	b.Run("evaluate "+js, chromedp.Evaluate(js, out))
}

// Fill sets form fields by CSS selector and submits with the button,
// as Click does.
func (b *Tab) Fill(fields map[string]string, button string, click func(string)) {
	b.T.Helper()
	var actions []chromedp.Action
	for sel, v := range fields {
		actions = append(actions, chromedp.SetValue(sel, v, chromedp.ByQuery))
	}
	b.Run("fill for "+button, actions...)
	click(button)
}

// Click clicks a button, waiting for it to be there, and waits for the
// page the form leads to (POST, redirect, GET) to have loaded.
func (b *Tab) Click(sel string) {
	b.T.Helper()
	b.Run("click "+sel, chromedp.Evaluate(`window.__devmsgOld = 1`, nil), chromedp.Click(sel, chromedp.ByQuery))
	b.waitNextPage(sel)
}

// ClickNow is Click in one evaluation, for a button inside a live
// section that may be replaced between finding it and clicking it.
func (b *Tab) ClickNow(sel string) {
	b.T.Helper()
	b.Run("click "+sel, chromedp.Evaluate(`window.__devmsgOld = 1; document.querySelector(`+strconv.Quote(sel)+`).click()`, nil))
	b.waitNextPage(sel)
}

// waitNextPage waits until the page a click led to has loaded: the mark
// Click set on the old page is gone. Evaluating while the page
// navigates fails; that is part of waiting.
func (b *Tab) waitNextPage(sel string) {
	b.T.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var loaded bool
		ctx, cancel := context.WithTimeout(b.Ctx, 2*time.Second)
		err := chromedp.Run(ctx, chromedp.Evaluate(`typeof window.__devmsgOld === "undefined" && document.readyState === "complete"`, &loaded))
		cancel()
		if err == nil && loaded {
			return
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("click %s: the next page did not load within 15s (last error: %v)", sel, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Screenshot saves the full page as a PNG; errors are logged only.
func (b *Tab) Screenshot(path string) {
	var png []byte
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		b.T.Logf("screenshot %s: %v", path, err)
		return
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.T.Logf("screenshot %s: %v", path, err)
	}
}
