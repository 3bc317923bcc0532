package restapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/events"
)

type eventWebhook struct {
	URL       string   `json:"url"`
	Types     []string `json:"types"`
	Format    string   `json:"format"`
	CreatedAt int64    `json:"created_at"`
}

type eventWebhookList struct {
	Webhooks      []eventWebhook `json:"webhooks"`
	SigningSecret string         `json:"signing_secret"`
}

func webhooksPath(appKey string) string { return "/admin/v1/apps/" + appKey + "/events/webhooks" }

func (e *env) webhooks(t *testing.T, c creds) eventWebhookList {
	t.Helper()
	r := e.do("GET", webhooksPath(e.app.Key), nil, &c)
	r.wantOK(t)
	if !strings.Contains(string(r.body), `"webhooks":[`) {
		t.Fatalf("webhooks is not an array: %s", r.body)
	}
	var out eventWebhookList
	r.decode(t, &out)
	return out
}

func webhookURLs(l eventWebhookList) []string {
	var out []string
	for _, h := range l.Webhooks {
		out = append(out, h.URL)
	}
	return out
}

// Adding a webhook verifies its URL with the echostr GET of callback
// URLs, carrying the app's Basic header; the list shows it with its
// types and format.
func TestEventWebhookAddVerifiesAndLists(t *testing.T) {
	e := callbackEnv(t)
	own := e.appCreds()
	rcv := newReceiver(t)
	var user, pass string
	rcv.set(func(w http.ResponseWriter, req *http.Request, echostr string) {
		user, pass, _ = req.BasicAuth()
		io.WriteString(w, echostr)
	})
	e.do("POST", webhooksPath(e.app.Key), map[string]any{"url": rcv.url("/all")}, &own).wantOK(t)
	if rcv.checks.Load() != 1 || user != e.app.Key || pass != e.app.MasterSecret {
		t.Fatalf("verification: %d GETs, Basic %q:%q; want one with the app's key and master secret", rcv.checks.Load(), user, pass)
	}
	e.do("POST", webhooksPath(e.app.Key), map[string]any{"url": rcv.url("/jiot"), "format": "jiot"}, &own).wantOK(t)
	e.do("POST", webhooksPath(e.app.Key), map[string]any{"url": rcv.url("/some"), "types": []string{"device.offline", "device.online"}}, &own).wantOK(t)

	l := e.webhooks(t, own)
	want := []eventWebhook{
		{URL: rcv.url("/all"), Types: events.Types},
		{URL: rcv.url("/jiot"), Types: []string{"device.event"}, Format: "jiot"},
		{URL: rcv.url("/some"), Types: []string{"device.offline", "device.online"}},
	}
	if len(l.Webhooks) != len(want) {
		t.Fatalf("webhooks %+v, want %+v", l.Webhooks, want)
	}
	for i, h := range l.Webhooks {
		if h.URL != want[i].URL || !slices.Equal(h.Types, want[i].Types) || h.Format != want[i].Format || h.CreatedAt == 0 {
			t.Fatalf("webhook %d: %+v, want %+v", i, h, want[i])
		}
	}
	if !strings.HasPrefix(l.SigningSecret, "whsec_") {
		t.Fatalf("signing_secret %q", l.SigningSecret)
	}
	// The same secret as the callbacks'.
	var cb callbackSettings
	e.do("GET", "/admin/v1/apps/"+e.app.Key+"/callback", nil, &own).decode(t, &cb)
	if cb.SigningSecret != l.SigningSecret {
		t.Fatalf("signing_secret %q, the callbacks' is %q", l.SigningSecret, cb.SigningSecret)
	}
}

// A URL that fails the verification, breaks a rule or is refused by the
// address guard is not added.
func TestEventWebhookAddRefused(t *testing.T) {
	e := callbackEnv(t)
	own := e.appCreds()
	rcv := newReceiver(t)
	path := webhooksPath(e.app.Key)

	rcv.set(func(w http.ResponseWriter, _ *http.Request, echostr string) { io.WriteString(w, echostr+"\n") })
	e.do("POST", path, map[string]any{"url": rcv.url("/h")}, &own).wantError(t, 400, 1003, "verification failed", "newline")
	rcv.set(func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusNotFound) })
	e.do("POST", path, map[string]any{"url": rcv.url("/h")}, &own).wantError(t, 400, 1003, "verification failed: HTTP 404")
	rcv.set(echo)

	checks := rcv.checks.Load()
	for _, tc := range []struct {
		name      string
		body      any
		code      int
		fragments []string
	}{
		{"no url", map[string]any{"types": []string{"device.up"}}, 1002, []string{"url"}},
		{"unknown type", map[string]any{"url": rcv.url("/h"), "types": []string{"device.up", "device.sneezed"}}, 1003, []string{"types[1]", "device.sneezed"}},
		{"types not strings", map[string]any{"url": rcv.url("/h"), "types": []any{"device.up", 1}}, 1003, []string{"types[1] 1 is not an event type (one of ["}},
		{"types null", map[string]any{"url": rcv.url("/h"), "types": []any{nil}}, 1003, []string{"types[0] null is not an event type (one of ["}},
		{"types not an array", map[string]any{"url": rcv.url("/h"), "types": "device.up"}, 1003, []string{"types must be an array of event types"}},
		{"empty types", map[string]any{"url": rcv.url("/h"), "types": []string{}}, 1003, []string{"types must name at least one"}},
		{"jiot with device.up", map[string]any{"url": rcv.url("/h"), "format": "jiot", "types": []string{"device.up"}}, 1003, []string{"types of a jiot webhook"}},
		{"unknown format", map[string]any{"url": rcv.url("/h"), "format": "xml"}, 1003, []string{"format"}},
		{"ftp", map[string]any{"url": "ftp://example.com/h"}, 1003, []string{"event webhook URL must begin with http:// or https://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.do("POST", path, tc.body, &own).wantError(t, 400, tc.code, tc.fragments...)
		})
	}
	if n := rcv.checks.Load(); n != checks {
		t.Fatalf("%d verifications for webhooks that break a rule, want none", n-checks)
	}
	if l := e.webhooks(t, own); len(l.Webhooks) != 0 {
		t.Fatalf("refused webhooks were added: %+v", l.Webhooks)
	}

	// Without callback.allowed_networks, loopback is refused before a
	// byte is sent, without an address.
	guarded := newEnv(t, allowCustomPorts)
	gown := guarded.appCreds()
	r := guarded.do("POST", webhooksPath(guarded.app.Key), map[string]any{"url": rcv.url("/h")}, &gown)
	r.wantError(t, 400, 1003, "URL not allowed: event webhook URL "+strconv.Quote(rcv.url("/h"))+guardedText)
	if strings.Contains(string(r.body), "dial") || rcv.checks.Load() != checks {
		t.Fatalf("the guard let a request through or named the dial: %s", r.body)
	}
}

// At most 5 webhooks per app, each URL once; delete frees a place.
func TestEventWebhookLimitAndDelete(t *testing.T) {
	e := callbackEnv(t)
	own := e.appCreds()
	rcv := newReceiver(t)
	path := webhooksPath(e.app.Key)
	var urls []string
	for i := range 5 {
		urls = append(urls, rcv.url(fmt.Sprintf("/h%d", i)))
		e.do("POST", path, map[string]any{"url": urls[i]}, &own).wantOK(t)
	}
	e.do("POST", path, map[string]any{"url": urls[0]}, &own).wantError(t, 400, 1003, "already configured")
	e.do("POST", path, map[string]any{"url": rcv.url("/h5")}, &own).wantError(t, 400, 1003, "at most 5 event webhooks")

	e.do("DELETE", path, nil, &own).wantError(t, 400, 1002, "url")
	e.do("DELETE", path+"?url="+url.QueryEscape(rcv.url("/nope")), nil, &own).wantError(t, 400, 1003, "not configured")
	var after eventWebhookList
	r := e.do("DELETE", path+"?url="+url.QueryEscape(urls[2]), nil, &own)
	r.wantOK(t)
	r.decode(t, &after)
	want := slices.Delete(slices.Clone(urls), 2, 3)
	if got := webhookURLs(after); !slices.Equal(got, want) {
		t.Fatalf("after delete: %v, want %v", got, want)
	}
	e.do("POST", path, map[string]any{"url": rcv.url("/h5")}, &own).wantOK(t)
	if got := webhookURLs(e.webhooks(t, own)); !slices.Equal(got, append(want, rcv.url("/h5"))) {
		t.Fatalf("webhooks %v", got)
	}
}

// An app's credentials reach its own webhooks only.
func TestEventWebhookCrossTenant(t *testing.T) {
	e := callbackEnv(t)
	own := e.appCreds()
	other := credsOf(e.createApp("other-app"))
	rcv := newReceiver(t)
	path := webhooksPath(e.app.Key)
	e.do("POST", path, map[string]any{"url": rcv.url("/a")}, &own).wantOK(t)

	e.do("GET", path, nil, &other).wantError(t, 401, 1004, "do not grant access")
	e.do("POST", path, map[string]any{"url": rcv.url("/b")}, &other).wantError(t, 401, 1004, "do not grant access")
	e.do("DELETE", path+"?url="+url.QueryEscape(rcv.url("/a")), nil, &other).wantError(t, 401, 1004, "do not grant access")
	if got := webhookURLs(e.webhooks(t, own)); !slices.Equal(got, []string{rcv.url("/a")}) {
		t.Fatalf("after the other app's calls: %v", got)
	}
	// The admin account reaches every app.
	adm := adminCreds()
	if got := webhookURLs(e.webhooks(t, adm)); len(got) != 1 {
		t.Fatalf("admin sees %v", got)
	}
}

// TestEventWebhookURLSpellings: a receiver is one webhook however its URL
// is spelled: scheme and host case, the default port and an empty query
// are normalised away, the URL is stored in that spelling (an upper-case
// scheme is valid, and accepted), and delete finds it in any spelling.
func TestEventWebhookURLSpellings(t *testing.T) {
	e := callbackEnv(t)
	own := e.appCreds()
	rcv := newReceiver(t)
	path := webhooksPath(e.app.Key)
	plain := rcv.url("/x") // http://127.0.0.1:PORT/x
	e.do("POST", path, map[string]any{"url": "HTTP://" + strings.TrimPrefix(plain, "http://") + "?"}, &own).wantOK(t)
	if got := webhookURLs(e.webhooks(t, own)); !slices.Equal(got, []string{plain}) {
		t.Fatalf("stored %v, want %v", got, []string{plain})
	}
	for _, u := range []string{plain, plain + "?", "Http://" + strings.TrimPrefix(plain, "http://")} {
		e.do("POST", path, map[string]any{"url": u}, &own).wantError(t, 400, 1003, "already configured")
	}
	e.do("POST", path, map[string]any{"url": plain + "?a=1"}, &own).wantOK(t) // another query is another URL
	e.do("DELETE", path+"?url="+url.QueryEscape("HTTP://"+strings.TrimPrefix(plain, "http://")+"?"), nil, &own).wantOK(t)
	if got := webhookURLs(e.webhooks(t, own)); !slices.Equal(got, []string{plain + "?a=1"}) {
		t.Fatalf("after delete: %v", got)
	}
}
