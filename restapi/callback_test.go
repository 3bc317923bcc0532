package restapi_test

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
)

// verifyTimeout is the echostr verification timeout of the callback tests.
const verifyTimeout = 500 * time.Millisecond

// Options for newEnv.
func allowCustomPorts(cfg *restapi.Config) { cfg.CallbackAllowCustomPorts = true }

func shortVerifyTimeout(cfg *restapi.Config) { cfg.CallbackTimeout = verifyTimeout }

// allowLoopback exempts 127.0.0.0/8 from the address guard, as
// callback.allowed_networks does, for receivers on loopback.
func allowLoopback(cfg *restapi.Config) {
	cfg.CallbackAllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
}

func callbackEvents(ev restapi.CallbackEvents) envOption {
	return func(cfg *restapi.Config) { cfg.Callbacks = ev }
}

// callbackEnv is an env whose callback URLs may be loopback receivers on
// any port, with a short verification timeout.
func callbackEnv(t *testing.T, opts ...envOption) *env {
	return newEnv(t, append([]envOption{allowCustomPorts, allowLoopback, shortVerifyTimeout}, opts...)...)
}

// receiver is a developer's server on loopback answering the echostr
// check: by echoing the value, or as answer says.
type receiver struct {
	srv     *httptest.Server
	answer  atomic.Value // func(http.ResponseWriter, *http.Request, string)
	checks  atomic.Int64 // GETs received
	release chan struct{}
}

func echo(w http.ResponseWriter, _ *http.Request, echostr string) { io.WriteString(w, echostr) }

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{release: make(chan struct{})}
	r.answer.Store(echo)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.checks.Add(1)
		r.answer.Load().(func(http.ResponseWriter, *http.Request, string))(w, req, req.URL.Query().Get("echostr"))
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.release) }) // runs first: lets a slow answer end
	return r
}

func (r *receiver) url(path string) string { return r.srv.URL + path }

func (r *receiver) set(answer func(http.ResponseWriter, *http.Request, string)) {
	r.answer.Store(answer)
}

// slow answers after the verification timeout.
func (r *receiver) slow(w http.ResponseWriter, _ *http.Request, echostr string) {
	select {
	case <-r.release:
	case <-time.After(4 * verifyTimeout):
	}
	io.WriteString(w, echostr)
}

type callbackSettings struct {
	Enabled       bool   `json:"enabled"`
	Types         []int  `json:"types"`
	SigningSecret string `json:"signing_secret"`
}

type urlList struct {
	URLs []store.CallbackURL `json:"urls"`
}

func (e *env) urls(t *testing.T, c creds) []store.CallbackURL {
	t.Helper()
	r := e.do("GET", "/admin/v1/apps/"+e.app.Key+"/callback/urls", nil, &c)
	r.wantOK(t)
	if !strings.Contains(string(r.body), `"urls":[`) {
		t.Fatalf("urls is not an array: %s", r.body)
	}
	var out urlList
	r.decode(t, &out)
	return out.URLs
}

func wantURLs(t *testing.T, got []store.CallbackURL, want ...store.CallbackURL) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("urls %+v, want %+v", got, want)
	}
}

func urlBody(u string) map[string]string { return map[string]string{"url": u} }

func TestCallbackSettings(t *testing.T) {
	e := newEnv(t)
	f := &callbackSettingsTest{e: e, adm: adminCreds(), own: e.appCreds(), path: "/admin/v1/apps/" + e.app.Key + "/callback"}
	t.Run("defaults: off, every type", f.defaults)
	t.Run("signing secret in Standard Webhooks form", f.signingSecret)
	t.Run("switch", f.toggle)
	t.Run("types", f.types)
	t.Run("invalid", f.invalid)
	t.Run("survives a restart", f.restart)
}

// callbackSettingsTest holds TestCallbackSettings' app; its subtests run
// in order on it.
type callbackSettingsTest struct {
	e        *env
	adm, own creds
	path     string
}

// allRecordTypes are the record types 0 to 8.
var allRecordTypes = []int{0, 1, 2, 3, 4, 5, 6, 7, 8}

func (f *callbackSettingsTest) get(t *testing.T) callbackSettings {
	t.Helper()
	r := f.e.do("GET", f.path, nil, &f.own)
	r.wantOK(t)
	var s callbackSettings
	r.decode(t, &s)
	return s
}

func (f *callbackSettingsTest) put(t *testing.T, c creds, body string) callbackSettings {
	t.Helper()
	r := f.e.do("PUT", f.path, body, &c)
	r.wantOK(t)
	var s callbackSettings
	r.decode(t, &s)
	if again := f.get(t); !slices.Equal(again.Types, s.Types) || again.Enabled != s.Enabled {
		t.Fatalf("PUT answered %+v, GET %+v", s, again)
	}
	return s
}

func (f *callbackSettingsTest) defaults(t *testing.T) {
	s := f.get(t)
	if s.Enabled || !slices.Equal(s.Types, allRecordTypes) {
		t.Fatalf("new app's settings %+v, want off and types 0..8", s)
	}
}

func (f *callbackSettingsTest) signingSecret(t *testing.T) {
	app, err := f.e.st.GetApp(t.Context(), f.e.app.Key)
	if err != nil {
		t.Fatal(err)
	}
	want := "whsec_" + base64.StdEncoding.EncodeToString([]byte(app.SigningSecret))
	if s := f.get(t); s.SigningSecret != want || app.SigningSecret == "" {
		t.Fatalf("signing_secret %q, want %q", s.SigningSecret, want)
	}
}

func (f *callbackSettingsTest) toggle(t *testing.T) {
	if s := f.put(t, f.adm, `{"enabled":true}`); !s.Enabled || !slices.Equal(s.Types, allRecordTypes) {
		t.Fatalf("after enabling: %+v", s)
	}
	// The admin's change is seen at once through the app's credentials,
	// which authenticate through the app cache.
	if !f.get(t).Enabled {
		t.Fatal("the app does not see the admin's change")
	}
	if s := f.put(t, f.own, `{"enabled":false}`); s.Enabled {
		t.Fatalf("after disabling: %+v", s)
	}
	f.put(t, f.own, `{"enabled":true}`)
}

func (f *callbackSettingsTest) types(t *testing.T) {
	if s := f.put(t, f.own, `{"types":[6,4,5]}`); !s.Enabled || !slices.Equal(s.Types, []int{4, 5, 6}) {
		t.Fatalf("after types [6,4,5]: %+v, want enabled and [4,5,6]", s)
	}
	if s := f.put(t, f.own, `{}`); !s.Enabled || !slices.Equal(s.Types, []int{4, 5, 6}) {
		t.Fatalf("after {}: %+v, want unchanged", s)
	}
	if s := f.put(t, f.own, `{"types":null,"enabled":null}`); !s.Enabled || !slices.Equal(s.Types, []int{4, 5, 6}) {
		t.Fatalf("after nulls: %+v, want unchanged", s)
	}
	if s := f.put(t, f.own, `{"types":[]}`); s.Types == nil || len(s.Types) != 0 {
		t.Fatalf("after types []: %+v, want []", s)
	}
	if s := f.put(t, f.adm, `{"types":[8,7,6,5,4,3,2,1,0],"enabled":false}`); s.Enabled || !slices.Equal(s.Types, allRecordTypes) {
		t.Fatalf("after all types: %+v", s)
	}
	f.put(t, f.own, `{"types":[4,5,6],"enabled":true}`)
}

func (f *callbackSettingsTest) invalid(t *testing.T) {
	bad := []struct{ name, body, fragment string }{
		{"enabled not a bool", `{"enabled":"yes"}`, "enabled"},
		{"enabled a number", `{"enabled":1}`, "enabled"},
		{"types not an array", `{"types":"all"}`, "types"},
		{"types an object", `{"types":{"0":true}}`, "types"},
		{"type too big", `{"types":[4,9]}`, "types[1]: 9"},
		{"type negative", `{"types":[-1]}`, "types[0]: -1"},
		{"type a fraction", `{"types":[1.5]}`, "types[0]"},
		{"type a string", `{"types":["1"]}`, "types[0]"},
		{"type null", `{"types":[null]}`, "types[0]"},
		{"duplicate type", `{"types":[4,5,4]}`, "types[2]: record type 4 appears twice"},
		{"body an array", `[]`, "request body"},
		{"malformed", `{"enabled":`, "request body"},
		{"valid enabled with bad types", `{"enabled":false,"types":[10]}`, "types[0]"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			f.e.do("PUT", f.path, tc.body, &f.own).wantError(t, 400, 1003, tc.fragment)
		})
	}
	if s := f.get(t); !s.Enabled || !slices.Equal(s.Types, []int{4, 5, 6}) {
		t.Fatalf("after refused changes: %+v, want unchanged", s)
	}
}

func (f *callbackSettingsTest) restart(t *testing.T) {
	f.e.restart()
	if s := f.get(t); !s.Enabled || !slices.Equal(s.Types, []int{4, 5, 6}) {
		t.Fatalf("after restart: %+v", s)
	}
}

func TestCallbackURLs(t *testing.T) {
	e := callbackEnv(t)
	rcv := newReceiver(t)
	adm, own := adminCreds(), e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	u := func(name string) string { return rcv.url("/" + name) }
	add := func(t *testing.T, c creds, name string) []store.CallbackURL {
		t.Helper()
		r := e.do("POST", base, urlBody(u(name)), &c)
		r.wantOK(t)
		var out urlList
		r.decode(t, &out)
		return out.URLs
	}
	cu := func(name string, def bool) store.CallbackURL { return store.CallbackURL{URL: u(name), Default: def} }

	t.Run("none at first", func(t *testing.T) {
		wantURLs(t, e.urls(t, own))
	})
	t.Run("first becomes the default", func(t *testing.T) {
		before := rcv.checks.Load()
		wantURLs(t, add(t, own, "a"), cu("a", true))
		if rcv.checks.Load() != before+1 {
			t.Fatal("adding a URL did not verify it")
		}
		wantURLs(t, add(t, adm, "b"), cu("a", true), cu("b", false))
		wantURLs(t, e.urls(t, own), cu("a", true), cu("b", false))
	})
	t.Run("duplicate", func(t *testing.T) {
		before := rcv.checks.Load()
		e.do("POST", base, urlBody(u("a")), &own).wantError(t, 400, 1003, "already configured")
		if rcv.checks.Load() != before {
			t.Error("a duplicate was verified before being refused")
		}
	})
	t.Run("at most 5", func(t *testing.T) {
		add(t, own, "c")
		add(t, own, "d")
		wantURLs(t, add(t, own, "e"), cu("a", true), cu("b", false), cu("c", false), cu("d", false), cu("e", false))
		before := rcv.checks.Load()
		e.do("POST", base, urlBody(u("f")), &own).wantError(t, 400, 1003, "at most 5 callback URLs")
		if rcv.checks.Load() != before {
			t.Error("a 6th URL was verified before being refused")
		}
		if n := len(e.urls(t, own)); n != 5 {
			t.Fatalf("%d URLs after a refused 6th", n)
		}
	})
	t.Run("the default cannot be deleted", func(t *testing.T) {
		e.do("DELETE", base+"?url="+url.QueryEscape(u("a")), nil, &own).
			wantError(t, 400, 1003, "the default URL cannot be deleted; make another URL the default first")
	})
	t.Run("delete errors", func(t *testing.T) {
		e.do("DELETE", base+"?url="+url.QueryEscape(u("zzz")), nil, &own).wantError(t, 400, 1003, "not configured")
		e.do("DELETE", base, nil, &own).wantError(t, 400, 1002, "url")
		e.do("DELETE", base+"?url=", nil, &own).wantError(t, 400, 1002, "url")
	})
	t.Run("make default", func(t *testing.T) {
		r := e.do("POST", base+"/default", urlBody(u("c")), &own)
		r.wantOK(t)
		var out urlList
		r.decode(t, &out)
		wantURLs(t, out.URLs, cu("a", false), cu("b", false), cu("c", true), cu("d", false), cu("e", false))
		wantURLs(t, e.urls(t, adm), out.URLs...)
		e.do("POST", base+"/default", urlBody(u("zzz")), &own).wantError(t, 400, 1003, "not configured")
		e.do("POST", base+"/default", `{}`, &own).wantError(t, 400, 1002, "url")
		e.do("POST", base+"/default", `{"url":""}`, &own).wantError(t, 400, 1002, "url")
		e.do("POST", base+"/default", `{"url":5}`, &own).wantError(t, 400, 1003, "url")
		// Making the default the default again changes nothing.
		e.do("POST", base+"/default", urlBody(u("c")), &adm).wantOK(t)
	})
	t.Run("delete a non-default URL", func(t *testing.T) {
		r := e.do("DELETE", base+"?url="+url.QueryEscape(u("a")), nil, &own)
		r.wantOK(t)
		var out urlList
		r.decode(t, &out)
		wantURLs(t, out.URLs, cu("b", false), cu("c", true), cu("d", false), cu("e", false))
		// The old default is gone and there is room for another URL.
		wantURLs(t, add(t, adm, "f"), cu("b", false), cu("c", true), cu("d", false), cu("e", false), cu("f", false))
		e.do("DELETE", base+"?url="+url.QueryEscape(u("c")), nil, &adm).wantError(t, 400, 1003, "default")
	})
	t.Run("test endpoint", func(t *testing.T) {
		// A URL not configured, with a query of its own.
		r := e.do("POST", base+"/test", urlBody(u("new?x=1")), &own)
		r.wantOK(t)
		if want := fmt.Sprintf(`{"ok":true,"url":%q}`, u("new?x=1")); string(r.body) != want {
			t.Fatalf("test answered %s, want %s", r.body, want)
		}
		// A configured one.
		e.do("POST", base+"/test", urlBody(u("b")), &adm).wantOK(t)
		if n := len(e.urls(t, own)); n != 5 {
			t.Fatalf("testing a URL changed the list (%d URLs)", n)
		}
		e.do("POST", base+"/test", `{}`, &own).wantError(t, 400, 1002, "url")
	})
	t.Run("survives a restart", func(t *testing.T) {
		before := e.urls(t, own)
		e.restart()
		wantURLs(t, e.urls(t, own), before...)
	})
}

func TestCallbackURLVerification(t *testing.T) {
	e := callbackEnv(t)
	rcv := newReceiver(t)
	own := e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	target := newReceiver(t) // where the redirect points; it would pass

	fails := []struct {
		name     string
		answer   func(http.ResponseWriter, *http.Request, string)
		fragment string
	}{
		{"wrong body", func(w http.ResponseWriter, _ *http.Request, _ string) { io.WriteString(w, "success") },
			"verification failed: body did not equal echostr"},
		{"trailing newline", func(w http.ResponseWriter, _ *http.Request, s string) { io.WriteString(w, s+"\n") },
			"verification failed: body did not equal echostr"},
		{"extra whitespace", func(w http.ResponseWriter, _ *http.Request, s string) { io.WriteString(w, " "+s+" ") },
			"verification failed: body did not equal echostr"},
		{"JSON-quoted", func(w http.ResponseWriter, _ *http.Request, s string) { fmt.Fprintf(w, "%q", s) },
			"verification failed: body did not equal echostr"},
		{"non-200 with the right body", func(w http.ResponseWriter, _ *http.Request, s string) {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, s)
		}, "verification failed: HTTP 202"},
		{"404", func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusNotFound) },
			"verification failed: HTTP 404"},
		{"redirect", func(w http.ResponseWriter, req *http.Request, _ string) {
			http.Redirect(w, req, target.url("/?"+req.URL.RawQuery), http.StatusFound)
		}, "verification failed: HTTP 302"},
		{"timeout", rcv.slow, "verification failed: no response within 500ms"},
	}
	for _, tc := range fails {
		t.Run(tc.name, func(t *testing.T) {
			rcv.set(tc.answer)
			defer rcv.set(echo)
			e.do("POST", base, urlBody(rcv.url("/cb")), &own).wantError(t, 400, 1003, tc.fragment, rcv.url("/cb"))
			wantURLs(t, e.urls(t, own))
			e.do("POST", base+"/test", urlBody(rcv.url("/cb")), &own).wantError(t, 400, 1003, tc.fragment)
		})
	}
	if n := target.checks.Load(); n != 0 {
		t.Errorf("a redirect was followed (%d requests to its target)", n)
	}
	t.Run("unreachable", func(t *testing.T) {
		gone := httptest.NewServer(http.NotFoundHandler())
		u := gone.URL + "/cb"
		gone.Close()
		e.do("POST", base, urlBody(u), &own).wantError(t, 400, 1003, "verification failed")
	})
	t.Run("pass after fixing the receiver", func(t *testing.T) {
		e.do("POST", base, urlBody(rcv.url("/cb")), &own).wantOK(t)
		wantURLs(t, e.urls(t, own), store.CallbackURL{URL: rcv.url("/cb"), Default: true})
	})
}

func TestCallbackURLRules(t *testing.T) {
	e := callbackEnv(t)
	rcv := newReceiver(t)
	own := e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	host := strings.TrimPrefix(rcv.srv.URL, "http://")
	bad := []struct{ name, url, fragment string }{
		{"too long", rcv.url("/" + strings.Repeat("a", 2048)), "at most 2048 bytes"},
		{"ftp", "ftp://" + host + "/cb", "must begin with http:// or https://"},
		{"no scheme", host + "/cb", "must begin with http:// or https://"},
		{"upper-case scheme", "HTTP://" + host + "/cb", "must begin with http:// or https://"},
		{"no host", "http:///cb", "must have a host"},
		{"user info", "http://user:pw@" + host + "/cb", "user info"},
		{"fragment", rcv.url("/cb#top"), "fragment"},
		{"NUL", rcv.url("/c\x00b"), "control characters"},
		{"newline", rcv.url("/cb\r\n"), "control characters"},
		{"space", rcv.url("/c b"), "spaces"},
		{"port out of range", "http://127.0.0.1:99999/cb", "port must be 1 to 65535"},
		{"port not a number", "http://127.0.0.1:x/cb", "not a valid absolute URL"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e.do("POST", base, urlBody(tc.url), &own).wantError(t, 400, 1003, tc.fragment)
			e.do("POST", base+"/test", urlBody(tc.url), &own).wantError(t, 400, 1003, tc.fragment)
		})
	}
	if n := rcv.checks.Load(); n != 0 {
		t.Errorf("URLs breaking a rule were verified (%d requests)", n)
	}
	wantURLs(t, e.urls(t, own))
	t.Run("missing or wrong type", func(t *testing.T) {
		for _, p := range []string{base, base + "/test"} {
			e.do("POST", p, `{}`, &own).wantError(t, 400, 1002, "url")
			e.do("POST", p, `{"url":null}`, &own).wantError(t, 400, 1002, "url")
			e.do("POST", p, `{"url":""}`, &own).wantError(t, 400, 1002, "url")
			e.do("POST", p, `{"url":["http://a/"]}`, &own).wantError(t, 400, 1003, "url must be a string")
			e.do("POST", p, `"http://a/"`, &own).wantError(t, 400, 1003, "request body")
		}
	})
}

func TestCallbackCustomPortRefused(t *testing.T) {
	e := newEnv(t, shortVerifyTimeout) // callback.allow_custom_ports off
	rcv := newReceiver(t)
	own := e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	port := rcv.srv.URL[strings.LastIndex(rcv.srv.URL, ":")+1:]
	for _, p := range []string{base, base + "/test"} {
		e.do("POST", p, urlBody(rcv.url("/cb")), &own).wantError(t, 400, 1003,
			"custom ports are not allowed (callback.allow_custom_ports is off): port "+port)
	}
	e.do("POST", base, urlBody("https://127.0.0.1:80/cb"), &own).wantError(t, 400, 1003, "custom ports are not allowed", "port 80")
	if n := rcv.checks.Load(); n != 0 {
		t.Errorf("a URL with a custom port was verified (%d requests)", n)
	}
	wantURLs(t, e.urls(t, own))
}

// redeliveries records the CallbackEvents the API sends.
type redeliveries struct {
	mu  sync.Mutex
	got []string
}

func (r *redeliveries) Redelivered(appKey, url string, _ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, appKey+" "+url)
}

func (r *redeliveries) Recent(string) []callback.Delivery { return nil }

func (r *redeliveries) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// putDeadLetter files a dead letter of n delivery-success records.
func (e *env) putDeadLetter(t *testing.T, appKey, url string, id int64, n int) store.DeadLetter {
	t.Helper()
	d := store.DeadLetter{ID: fmt.Sprint(id), AppKey: appKey, URL: url, Attempts: 4, LastError: "HTTP 503", Time: 1767225900}
	for i := range n {
		msgid := fmt.Sprint(1188240153776619520 + id)
		d.Entries = append(d.Entries, store.OutboxEntry{
			Seq: id + int64(i), ID: fmt.Sprintf("%s-%d", msgid, i), AppKey: appKey, CallbackURL: url, Time: 1767225600000,
			Record: store.Record{Type: store.RecordDeliveryFailure, ChannelKey: appKey, MsgID: msgid, UserID: "dev-0001",
				SenderID: "dev-0001", SentTime: 1767225601, Error: &store.RecordError{Code: 3005, Message: "ttl expired"}},
		})
	}
	if err := e.st.PutDeadLetter(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	return d
}

type deadLetterPage struct {
	DeadLetters []struct {
		ID        string `json:"id"`
		URL       string `json:"url"`
		Attempts  int    `json:"attempts"`
		LastError string `json:"last_error"`
		Time      int64  `json:"time"`
		Records   []struct {
			ID    string             `json:"id"`
			Type  int                `json:"type"`
			MsgID string             `json:"msgid"`
			Error *store.RecordError `json:"error"`
		} `json:"records"`
	} `json:"dead_letters"`
	Next string `json:"next"`
}

// TestCallbackCrossApp checks every callback endpoint: another app's
// credentials are refused, the admin and the app itself succeed.
func TestCallbackCrossApp(t *testing.T) {
	e := callbackEnv(t)
	rcv := newReceiver(t)
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	base := "/admin/v1/apps/" + e.app.Key + "/callback"
	e.do("POST", base+"/urls", urlBody(rcv.url("/default")), &own).wantOK(t)
	for i, id := range []int64{100, 200} {
		e.putDeadLetter(t, e.app.Key, rcv.url("/default"), id, i+1)
	}

	type call struct {
		method, path string
		body         any
	}
	calls := func(who string, i int) []call {
		extra := rcv.url("/" + who)
		return []call{
			{"GET", base, nil},
			{"PUT", base, `{"enabled":true}`},
			{"GET", base + "/urls", nil},
			{"POST", base + "/urls", urlBody(extra)},
			{"POST", base + "/urls/test", urlBody(extra)},
			{"POST", base + "/urls/default", urlBody(rcv.url("/default"))},
			{"DELETE", base + "/urls?url=" + url.QueryEscape(extra), nil},
			{"GET", base + "/deadletters", nil},
			{"POST", base + "/deadletters/" + fmt.Sprint(100*(i+1)) + "/redeliver", nil},
		}
	}
	for _, c := range calls("foreign", 0) {
		t.Run("foreign "+c.method+" "+c.path, func(t *testing.T) {
			e.do(c.method, c.path, c.body, &foreign).wantError(t, 401, 1004, e.app.Key)
		})
	}
	for i, who := range []creds{adm, own} {
		for _, c := range calls(who.user, i) {
			t.Run(who.user+" "+c.method+" "+c.path, func(t *testing.T) {
				e.do(c.method, c.path, c.body, &who).wantOK(t)
			})
		}
	}
	t.Run("unknown app", func(t *testing.T) {
		for _, c := range calls("admin", 0) {
			p := strings.Replace(c.path, e.app.Key, "nope", 1)
			e.do(c.method, p, c.body, &adm).wantError(t, 400, 1003, `app "nope" not found`)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		for _, c := range calls("anon", 0) {
			e.do(c.method, c.path, c.body, nil).wantError(t, 401, 1004)
		}
	})
}

// recentDeliveries answers Recent with fixed attempts per app.
type recentDeliveries struct {
	mu    sync.Mutex
	byApp map[string][]callback.Delivery
}

func (r *recentDeliveries) Redelivered(string, string, int) {}

func (r *recentDeliveries) Recent(appKey string) []callback.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byApp[appKey])
}

func TestCallbackDeliveries(t *testing.T) {
	rd := &recentDeliveries{byApp: map[string][]callback.Delivery{}}
	e := newEnv(t, callbackEvents(rd))
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	path := "/admin/v1/apps/" + e.app.Key + "/callback/deliveries"
	newest := time.Date(2026, 1, 1, 8, 0, 10, 250_000_000, time.FixedZone("CET", 3600))
	rd.mu.Lock()
	rd.byApp[e.app.Key] = []callback.Delivery{ // newest first, as Recent returns them
		{Time: newest, URL: "https://example.com/cb", Records: 100, Attempt: 1, Status: 200, LatencyMS: 12.5},
		{Time: newest.Add(-10 * time.Second), URL: "https://example.com/cb", Records: 3, Attempt: 2, Status: 503, LatencyMS: 8, Error: "HTTP 503"},
		{Time: newest.Add(-20 * time.Second), URL: "https://backup.example.com/cb", Records: 1, Attempt: 4, Status: 0, LatencyMS: 10000, Error: "no response within 10s"},
	}
	rd.byApp[other.Key] = []callback.Delivery{{Time: newest, URL: "https://other.example.com/cb", Records: 1, Attempt: 1, Status: 200, LatencyMS: 1}}
	rd.mu.Unlock()
	want := `{"deliveries":[` +
		`{"time":"2026-01-01T07:00:10.250Z","url":"https://example.com/cb","records":100,"attempt":1,"status":200,"latency_ms":12.5,"error":""},` +
		`{"time":"2026-01-01T07:00:00.250Z","url":"https://example.com/cb","records":3,"attempt":2,"status":503,"latency_ms":8,"error":"HTTP 503"},` +
		`{"time":"2026-01-01T06:59:50.250Z","url":"https://backup.example.com/cb","records":1,"attempt":4,"status":0,"latency_ms":10000,"error":"no response within 10s"}]}`
	for name, c := range map[string]creds{"admin": adm, "own app": own} {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", path, nil, &c)
			r.wantOK(t)
			if string(r.body) != want {
				t.Errorf("got  %s\nwant %s", r.body, want)
			}
		})
	}
	e.do("GET", path, nil, &foreign).wantError(t, 401, 1004, e.app.Key)
	e.do("GET", "/admin/v1/apps/nope/callback/deliveries", nil, &adm).wantError(t, 400, 1003, "nope")
	r := e.do("GET", "/admin/v1/apps/"+other.Key+"/callback/deliveries", nil, &foreign)
	if r.status != 200 || !strings.Contains(string(r.body), "other.example.com") || strings.Contains(string(r.body), "HTTP 503") {
		t.Errorf("other app's deliveries: %d %s", r.status, r.body)
	}

	t.Run("none yet", func(t *testing.T) {
		third := e.createApp("third")
		c := credsOf(third)
		if r := e.do("GET", "/admin/v1/apps/"+third.Key+"/callback/deliveries", nil, &c); string(r.body) != `{"deliveries":[]}` {
			t.Errorf("got %d %s", r.status, r.body)
		}
	})
	t.Run("no callback worker", func(t *testing.T) {
		plain := newEnv(t)
		c := plain.appCreds()
		if r := plain.do("GET", "/admin/v1/apps/"+plain.app.Key+"/callback/deliveries", nil, &c); string(r.body) != `{"deliveries":[]}` {
			t.Errorf("got %d %s", r.status, r.body)
		}
	})
}

// TestCallbackAddressGuard: a callback URL whose host is, or resolves to,
// loopback, link-local or another blocked address is refused with
// 400/1003 "URL not allowed", the kind of address and no dial detail, before any byte reaches
// it; callback.allowed_networks exempts a network.
func TestCallbackAddressGuard(t *testing.T) {
	e := newEnv(t, allowCustomPorts, shortVerifyTimeout) // no allowed_networks
	rcv := newReceiver(t)
	own := e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	port := rcv.srv.URL[strings.LastIndex(rcv.srv.URL, ":")+1:]
	for _, u := range []string{
		rcv.url("/cb"),                            // 127.0.0.1
		"http://localhost:" + port + "/cb",        // a name that resolves to loopback
		"http://[::ffff:127.0.0.1]:" + port + "/", // IPv4-mapped
		"http://[::1]:" + port + "/",
		"http://0.0.0.0:" + port + "/",
		"http://169.254.169.254/latest/meta-data/", // cloud metadata
		"http://10.0.0.1/cb",
		"http://[fd00::1]/cb",
	} {
		for _, p := range []string{base, base + "/test"} {
			r := e.do("POST", p, urlBody(u), &own)
			r.wantError(t, 400, 1003, "URL not allowed: callback URL "+strconv.Quote(u)+guardedText)
			for _, detail := range []string{"dial", "connect", "tcp", "refused"} {
				if strings.Contains(string(r.body), detail) {
					t.Errorf("POST %s %s: the error %s gives dial detail %q", p, u, r.body, detail)
				}
			}
		}
	}
	if n := rcv.checks.Load(); n != 0 {
		t.Errorf("the guarded receiver got %d requests", n)
	}
	wantURLs(t, e.urls(t, own))

	allowed := newEnv(t, allowCustomPorts, allowLoopback, shortVerifyTimeout)
	aown := allowed.appCreds()
	allowed.do("POST", "/admin/v1/apps/"+allowed.app.Key+"/callback/urls", urlBody(rcv.url("/cb")), &aown).wantOK(t)
}

// guardedText ends the message of a URL the address guard refused.
const guardedText = " points to a loopback, private, link-local or other internal address;" +
	" the service operator can allow its network with the callback.allowed_networks setting"

// TestCallbackAddressGuardMessage: the refusal of a name that resolves to
// loopback names the setting that exempts a network, and not the address
// the name resolved to.
func TestCallbackAddressGuardMessage(t *testing.T) {
	e := newEnv(t, allowCustomPorts, shortVerifyTimeout) // no allowed_networks
	rcv := newReceiver(t)
	own := e.appCreds()
	port := rcv.srv.URL[strings.LastIndex(rcv.srv.URL, ":")+1:]
	u := "http://localhost:" + port + "/cb"
	r := e.do("POST", "/admin/v1/apps/"+e.app.Key+"/callback/urls", urlBody(u), &own)
	r.wantError(t, 400, 1003, "loopback, private, link-local or other internal address", "callback.allowed_networks")
	for _, addr := range []string{"127.0.0.1", "::1", "[::1]"} {
		if strings.Contains(string(r.body), addr) {
			t.Errorf("the refusal of %s names the address %s: %s", u, addr, r.body)
		}
	}
	if n := rcv.checks.Load(); n != 0 {
		t.Errorf("the guarded receiver got %d requests", n)
	}
}

// TestCallbackVerifyCarriesAuth: the echostr GET carries the Basic header
// of the record POSTs, so a receiver that answers 401 without it (a public
// SDK's callback server in its default mode) can be added.
func TestCallbackVerifyCarriesAuth(t *testing.T) {
	e := callbackEnv(t)
	rcv := newReceiver(t)
	rcv.set(func(w http.ResponseWriter, r *http.Request, echostr string) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != e.app.Key || pass != e.app.MasterSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, echostr)
	})
	own := e.appCreds()
	base := "/admin/v1/apps/" + e.app.Key + "/callback/urls"
	e.do("POST", base+"/test", urlBody(rcv.url("/cb")), &own).wantOK(t)
	e.do("POST", base, urlBody(rcv.url("/cb")), &own).wantOK(t)
	// The admin adding it for the app sends the app's credentials too.
	adm := adminCreds()
	e.do("POST", base, urlBody(rcv.url("/cb2")), &adm).wantOK(t)
}
