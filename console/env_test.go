package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"github.com/devmsg/devmsg/restapi/restapitest"
	"html"
	"io"
	"log"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

const adminPassword = "test-admin-password"

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// recentDeliveries stands in for the callback worker's memory of recent
// POSTs.
type recentDeliveries struct{ d []callback.Delivery }

func (r *recentDeliveries) Redelivered(string, string, int) {}
func (r *recentDeliveries) Recent(string) []callback.Delivery {
	return r.d
}

// env is the real API over Pebble in a temp dir with the console mounted
// beside it, as cmd/devmsg mounts it, behind an HTTPS test server.
type env struct {
	t      *testing.T
	st     store.Store
	api    http.Handler
	c      *Console
	srv    *httptest.Server
	clock  *clock
	reg    *prometheus.Registry
	events *recentDeliveries
	// jobs is the API's jobs service; its runner runs only once a test
	// starts it (newJobsEnv).
	jobs *job.Service

	mu     sync.Mutex
	sleeps []time.Duration // delays after failed sign-ins
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the API's configuration changed by tune.
func newEnvWith(t *testing.T, tune func(*restapi.Config)) *env {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	e := &env{t: t, st: st, clock: &clock{t: time.Unix(1_790_000_000, 0)}, reg: prometheus.NewRegistry(), events: &recentDeliveries{}}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := restapi.Config{
		DefaultRateLimit:         1000,
		AdminUsername:            "admin",
		AdminPasswordSHA256:      sha256.Sum256([]byte(adminPassword)),
		CallbackAllowCustomPorts: true, // loopback receivers on any port
		CallbackAllowedNetworks:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		CallbackTimeout:          2 * time.Second,
		Callbacks:                e.events,
		// The console's own lockout runs on the test clock; the API's
		// throttle, on real time, must not get in its way.
		AuthSourceFailures:   1000,
		AuthIdentityFailures: 1000,
	}
	if tune != nil {
		tune(&cfg)
	}
	cfg, err = restapitest.Config(st, cfg)
	if err != nil {
		t.Fatalf("services: %v", err)
	}
	api, err := restapi.New(cfg, st, discard, e.reg)
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	e.api = api.Handler()
	e.jobs = cfg.Jobs
	e.c, err = New(Config{API: e.api, Gatherer: e.reg, Logger: discard, Now: e.clock.Now})
	if err != nil {
		t.Fatalf("new console: %v", err)
	}
	e.c.sleep = func(_ *http.Request, d time.Duration) {
		e.mu.Lock()
		e.sleeps = append(e.sleeps, d)
		e.mu.Unlock()
	}
	mux := http.NewServeMux()
	mux.Handle("/", e.api)
	mux.Handle(Prefix, e.c)
	mux.Handle("/console", e.c)
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.srv.StartTLS()
	t.Cleanup(func() {
		e.srv.Close()
		e.c.Close()
	})
	return e
}

// apiCall calls the API directly as a script would, failing on non-200.
func (e *env) apiCall(user, pass, method, path string, body any, out any) {
	e.t.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(raw))
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	if rec.Code != 200 {
		e.t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			e.t.Fatal(err)
		}
	}
}

type app struct{ Name, Key, Secret string }

func (e *env) createApp(name string) app {
	e.t.Helper()
	var out apitypes.CreatedApp
	e.apiCall("admin", adminPassword, "POST", "/admin/v1/apps", map[string]string{"name": name}, &out)
	return app{out.Name, out.Key, out.MasterSecret}
}

func (e *env) createDevices(a app, names ...string) {
	e.t.Helper()
	devs := make([]map[string]string, len(names))
	for i, n := range names {
		devs[i] = map[string]string{"name": n}
	}
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/devices", map[string]any{"device": devs}, nil)
}

// browser is one user agent with its own cookies.
type browser struct {
	e      *env
	t      *testing.T
	client *http.Client
	csrf   string // of the last page that had forms
	last   page
}

type page struct {
	status int
	url    string // after redirects
	body   string
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	cl := *e.srv.Client() // a copy: each browser has its own jar
	cl.Jar = jar
	return &browser{e: e, t: e.t, client: &cl}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	p := page{resp.StatusCode, resp.Request.URL.Path, string(raw)}
	if resp.Request.URL.RawQuery != "" {
		p.url += "?" + resp.Request.URL.RawQuery
	}
	if m := csrfRE.FindStringSubmatch(p.body); m != nil {
		b.csrf = m[1]
	}
	b.last = p
	return p
}

func (b *browser) get(path string) page {
	b.t.Helper()
	req, err := http.NewRequest("GET", b.e.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

// post submits a form with the current CSRF token unless form sets one.
func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, err := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// upload submits a multipart form with one file.
func (b *browser) upload(path string, fields map[string]string, fileField, fileName, content string) page {
	b.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("csrf", b.csrf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	fw, err := mw.CreateFormFile(fileField, fileName)
	if err != nil {
		b.t.Fatal(err)
	}
	io.WriteString(fw, content)
	mw.Close()
	req, err := http.NewRequest("POST", b.e.srv.URL+path, &buf)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return b.do(req)
}

func (b *browser) loginAdmin() page {
	b.t.Helper()
	b.get("/console/login")
	p := b.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {adminPassword}})
	if p.status != 200 || p.url != "/console/" {
		b.t.Fatalf("admin sign-in: %d at %s:\n%s", p.status, p.url, p.body)
	}
	return p
}

func (b *browser) loginApp(a app) page {
	b.t.Helper()
	b.get("/console/login")
	p := b.post("/console/login", url.Values{"mode": {"app"}, "app_key": {a.Key}, "master_secret": {a.Secret}})
	if p.status != 200 || p.url != "/console/apps/"+a.Key {
		b.t.Fatalf("app sign-in: %d at %s:\n%s", p.status, p.url, p.body)
	}
	return p
}

// text returns the text inside the element with the id, tags removed and
// entities decoded ("" when absent). Good enough for the console's own
// markup, where such an element does not nest an element of its own tag.
func (p page) text(id string) string {
	m := regexp.MustCompile(`<(\w+)[^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindStringSubmatchIndex(p.body)
	if m == nil {
		return ""
	}
	rest := p.body[m[1]:]
	end := strings.Index(rest, "</"+p.body[m[2]:m[3]]+">")
	if end < 0 {
		return ""
	}
	inner := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(rest[:end], "")
	return strings.TrimSpace(html.UnescapeString(inner))
}

func (p page) has(s string) bool { return strings.Contains(p.body, s) }

// want fails unless the page has status and every fragment.
func (p page) want(t *testing.T, status int, fragments ...string) {
	t.Helper()
	if p.status != status {
		t.Fatalf("status %d at %s, want %d:\n%s", p.status, p.url, status, p.body)
	}
	for _, f := range fragments {
		if !strings.Contains(p.body, f) {
			t.Fatalf("page %s lacks %q:\n%s", p.url, f, p.body)
		}
	}
}
