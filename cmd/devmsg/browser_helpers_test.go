package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/devmsg/devmsg/internal/browsertest"
)

// browser is a headless Chromium tab on a server (browsertest.Tab),
// with the steps the console's whole-program tests take.
type browser struct {
	*browsertest.Tab
	t *testing.T
}

// newBrowser starts a headless browser for base (skipped without
// chromium); see browsertest.New.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	return &browser{Tab: browsertest.New(t, base), t: t}
}

func (b *browser) run(what string, actions ...chromedp.Action) { b.t.Helper(); b.Run(what, actions...) }
func (b *browser) open(path string)                            { b.t.Helper(); b.Open(path) }
func (b *browser) text(sel string) string                      { b.t.Helper(); return b.Text(sel) }
func (b *browser) click(sel string)                            { b.t.Helper(); b.Click(sel) }
func (b *browser) screenshot(path string)                      { b.Screenshot(path) }

// body returns the page's visible text.
func (b *browser) body() string { return b.text("body") }

// fill sets form fields by CSS selector and submits with the button.
func (b *browser) fill(fields map[string]string, submit string) {
	b.t.Helper()
	b.Fill(fields, submit, b.Click)
}

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

// docShot saves a screenshot for docs/console.md when DEVMSG_SCREENSHOTS
// names a directory (`make screenshots` sets it to docs/img).
func (b *browser) docShot(name string) {
	if dir := os.Getenv("DEVMSG_SCREENSHOTS"); dir != "" {
		b.screenshot(filepath.Join(dir, name+".png"))
	}
}
