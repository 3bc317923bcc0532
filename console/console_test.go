package console

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
)

func TestRedirectsToSlash(t *testing.T) {
	e := newEnv(t)
	cl := e.srv.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cl.Get(e.srv.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /console: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestSignInAdmin(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()

	p := b.get("/console/")
	if p.url != "/console/login" {
		t.Fatalf("signed out, /console/ went to %s", p.url)
	}
	p.want(t, 200, `id="login-admin-username"`, `id="login-app-key"`)

	p = b.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {"wrong"}})
	p.want(t, http.StatusUnauthorized, "Wrong user name or password.")
	if len(e.sleeps) != 1 || e.sleeps[0] != time.Second {
		t.Fatalf("delays after a failure: %v, want [1s]", e.sleeps)
	}

	p = b.loginAdmin()
	p.want(t, 200, `id="overview-connected"`, `data-app="`+a.Key+`"`)
	if got := p.text("whoami"); got != "Admin: admin" {
		t.Errorf("whoami %q", got)
	}
	// The cookie is what the brief asks for.
	var ck *http.Cookie
	u, _ := url.Parse(e.srv.URL + "/console/")
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			ck = c
		}
	}
	if ck == nil || len(ck.Value) != 43 {
		t.Fatalf("session cookie %+v", ck)
	}
	// Signed in, the sign-in page sends to the overview.
	if p := b.get("/console/login"); p.url != "/console/" {
		t.Errorf("signed in, /console/login went to %s", p.url)
	}
}

func TestSessionCookieAttributes(t *testing.T) {
	e := newEnv(t)
	c := e.c
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "https://x/console/login", nil)
	req.TLS = &tls.ConnectionState{} // served over HTTPS
	c.newSession(rec, req, &session{admin: true})
	sc := rec.Result().Cookies()
	if len(sc) != 1 {
		t.Fatalf("cookies %v", sc)
	}
	ck := sc[0]
	if ck.Name != sessionCookie || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console/" {
		t.Errorf("cookie %+v", ck)
	}
}

func TestSignInAppOwner(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	p := b.loginApp(a)
	p.want(t, 200, `id="app-key"`, a.Key)
	if p.has(a.Secret) {
		t.Error("the app page shows the master secret without Reveal")
	}
	if got := p.text("whoami"); got != "greenhouse ("+a.Key+")" {
		t.Errorf("whoami %q", got)
	}
	// The overview is the app's own.
	p = b.get("/console/")
	p.want(t, 200, `id="overview-app"`)
	if p.has(`id="overview-connected"`) {
		t.Error("an app owner sees service-wide numbers")
	}

	t.Run("wrong secret", func(t *testing.T) {
		b := e.browser()
		b.get("/console/login")
		p := b.post("/console/login", url.Values{"mode": {"app"}, "app_key": {a.Key}, "master_secret": {"nope"}})
		p.want(t, http.StatusUnauthorized, "Wrong app key or master secret.")
	})
	t.Run("admin credentials in the app form", func(t *testing.T) {
		b := e.browser()
		b.get("/console/login")
		p := b.post("/console/login", url.Values{"mode": {"app"}, "app_key": {"admin"}, "master_secret": {adminPassword}})
		p.want(t, http.StatusUnauthorized, "Wrong app key or master secret.")
	})
	t.Run("app credentials in the admin form", func(t *testing.T) {
		b := e.browser()
		b.get("/console/login")
		p := b.post("/console/login", url.Values{"mode": {"admin"}, "username": {a.Key}, "password": {a.Secret}})
		p.want(t, http.StatusUnauthorized, "use the App owner form")
	})
}

func TestCSRF(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginAdmin()
	for _, tc := range []struct {
		name  string
		token []string
	}{{"missing", []string{""}}, {"wrong", []string{"AAAA" + b.csrf[4:]}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.post("/console/apps/"+a.Key+"/callbacks/switch", url.Values{"csrf": tc.token, "enabled": {"1"}})
			p.want(t, http.StatusForbidden, "CSRF check failed")
		})
	}
	var cb struct{ Enabled bool }
	e.apiCall("admin", adminPassword, "GET", "/admin/v1/apps/"+a.Key+"/callback", nil, &cb)
	if cb.Enabled {
		t.Fatal("a POST without the CSRF token changed the switch")
	}

	t.Run("sign-in form", func(t *testing.T) {
		b := e.browser() // never loaded the sign-in page: no token cookie
		p := b.post("/console/login", url.Values{"csrf": {"x"}, "mode": {"admin"}, "username": {"admin"}, "password": {adminPassword}})
		p.want(t, http.StatusForbidden, "CSRF check failed")
	})
	t.Run("every form carries the token", func(t *testing.T) {
		e.createDevices(a, "dev-0001")
		for _, path := range []string{"/console/apps", "/console/apps/" + a.Key, "/console/apps/" + a.Key + "/devices",
			"/console/apps/" + a.Key + "/devices/dev-0001", "/console/apps/" + a.Key + "/callbacks"} {
			p := b.get(path)
			forms := strings.Count(p.body, `method="post"`)
			tokens := strings.Count(p.body, `name="csrf" value="`+b.csrf+`"`)
			if forms == 0 || forms != tokens {
				t.Errorf("%s: %d POST forms, %d CSRF inputs", path, forms, tokens)
			}
		}
	})
}

// TestLockoutParallelGuesses: while a failed guess is being delayed, no
// other guess for the same user from the same address is checked, so
// guesses sent at once cannot get past the lockout.
func TestLockoutParallelGuesses(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	delaying := make(chan struct{}, 1)
	e.c.sleep = func(*http.Request, time.Duration) {
		delaying <- struct{}{}
		<-release
	}
	slow, fast := e.browser(), e.browser()
	slow.get("/console/login")
	fast.get("/console/login")
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {"wrong"}})
	}()
	<-delaying
	fast.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {adminPassword}}).
		want(t, http.StatusTooManyRequests, "being checked")
	close(release)
	<-done
	fast.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {adminPassword}})
	if fast.last.url != "/console/" {
		t.Fatalf("after the delay the right password went to %s", fast.last.url)
	}
	long := strings.Repeat("a", maxUserLen+1)
	other := e.browser()
	other.get("/console/login")
	other.post("/console/login", url.Values{"mode": {"admin"}, "username": {long}, "password": {"x"}}).
		want(t, http.StatusBadRequest, "longer than")
}

func TestLockout(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.get("/console/login")
	try := func(pass string) page {
		return b.post("/console/login", url.Values{"mode": {"admin"}, "username": {"admin"}, "password": {pass}})
	}
	for i := 1; i < LockoutFailures; i++ {
		try("wrong").want(t, http.StatusUnauthorized, "Wrong user name or password.")
		e.clock.advance(time.Minute)
	}
	try("wrong").want(t, http.StatusTooManyRequests, "Too many failed sign-ins", "locked for 15 more minute(s)")
	if len(e.sleeps) != LockoutFailures {
		t.Errorf("%d delays, want one per failure (%d)", len(e.sleeps), LockoutFailures)
	}
	// Locked: even the right password is refused, without being checked.
	e.clock.advance(14 * time.Minute)
	try(adminPassword).want(t, http.StatusTooManyRequests, "locked for 1 more minute(s)")

	// Another user from the same address is not locked out.
	a := e.createApp("other")
	e.browser().loginApp(a)

	e.clock.advance(time.Minute)
	try(adminPassword)
	if b.last.url != "/console/" {
		t.Fatalf("after the lockout the right password went to %s:\n%s", b.last.url, b.last.body)
	}

	t.Run("failures spread over more than the window do not lock", func(t *testing.T) {
		b := e.browser()
		b.get("/console/login")
		for range 2 * LockoutFailures {
			p := b.post("/console/login", url.Values{"mode": {"app"}, "app_key": {a.Key}, "master_secret": {"wrong"}})
			p.want(t, http.StatusUnauthorized)
			e.clock.advance(LockoutWindow / (LockoutFailures - 1))
		}
	})
}

// TestAPIThrottleShown: when the API's throttle of failed authentication
// answers 429, the sign-in page says so with a 429, not as a failure of
// the service.
func TestAPIThrottleShown(t *testing.T) {
	e := newEnvWith(t, func(cfg *restapi.Config) { cfg.AuthSourceFailures = 2 })
	b := e.browser()
	b.get("/console/login")
	try := func(user string) page {
		return b.post("/console/login", url.Values{"mode": {"admin"}, "username": {user}, "password": {"wrong"}})
	}
	try("someone").want(t, http.StatusUnauthorized)
	try("someone-else").want(t, http.StatusUnauthorized) // the second failure from this address locks it
	try("a-third").want(t, http.StatusTooManyRequests, "Too many failed sign-ins", "retry after")
}

func TestSessionExpiry(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.loginAdmin()
	e.clock.advance(11 * time.Hour)
	if p := b.get("/console/"); p.url != "/console/" {
		t.Fatalf("after 11 h idle: %s", p.url)
	}
	e.clock.advance(11 * time.Hour) // 11 h after the last request: still alive
	if p := b.get("/console/apps"); p.url != "/console/apps" {
		t.Fatalf("after another 11 h idle: %s", p.url)
	}
	e.clock.advance(SessionIdle + time.Second)
	p := b.get("/console/apps")
	if p.url != "/console/login?expired=1" {
		t.Fatalf("after 12 h idle: %s", p.url)
	}
	p.want(t, 200, "Your session ended.")
	// A POST with the old session is not carried out either.
	p = b.post("/console/apps", url.Values{"name": {"late"}})
	if p.url != "/console/login?expired=1" {
		t.Fatalf("POST after expiry went to %s", p.url)
	}
}

func TestSignOut(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.loginAdmin()
	u, _ := url.Parse(e.srv.URL + "/console/")
	old := b.client.Jar.Cookies(u)
	p := b.post("/console/logout", nil)
	if p.url != "/console/login?signed_out=1" {
		t.Fatalf("sign-out went to %s", p.url)
	}
	p.want(t, 200, "You are signed out.")
	if p := b.get("/console/"); !strings.HasPrefix(p.url, "/console/login") {
		t.Fatalf("after sign-out /console/ went to %s", p.url)
	}
	// The old cookie is dead on the server, not just forgotten.
	stale := e.browser()
	stale.client.Jar.SetCookies(u, old)
	if p := stale.get("/console/"); !strings.HasPrefix(p.url, "/console/login") {
		t.Fatalf("the old session cookie still works: %s", p.url)
	}
}

func TestAppOwnerSeesOnlyOwnApp(t *testing.T) {
	e := newEnv(t)
	mine, other := e.createApp("mine"), e.createApp("other")
	e.createDevices(other, "dev-0001")
	b := e.browser()
	b.loginApp(mine)
	for _, path := range []string{
		"/console/apps/" + other.Key,
		"/console/apps/" + other.Key + "/devices",
		"/console/apps/" + other.Key + "/devices/dev-0001",
		"/console/apps/" + other.Key + "/messages?msgid=1",
		"/console/apps/" + other.Key + "/callbacks",
	} {
		t.Run("GET "+path, func(t *testing.T) {
			p := b.get(path)
			p.want(t, http.StatusNotFound, `id="error-page"`)
			if p.has(other.Name) || strings.Count(p.body, other.Key) > 0 {
				t.Errorf("the 404 page shows the other app")
			}
		})
	}
	for _, path := range []string{
		"/console/apps/" + other.Key + "/callbacks/switch",
		"/console/apps/" + other.Key + "/secret/reveal",
		"/console/apps/" + other.Key + "/devices/dev-0001/delete",
		"/console/apps",
	} {
		t.Run("POST "+path, func(t *testing.T) {
			b.post(path, url.Values{"enabled": {"1"}, "confirm": {"1"}, "name": {"x"}}).want(t, http.StatusNotFound)
		})
	}
	// The apps list is the admin's; an owner lands on their app.
	if p := b.get("/console/apps"); p.url != "/console/apps/"+mine.Key {
		t.Errorf("/console/apps went to %s", p.url)
	}
	var dev struct{ Device struct{ Flag int } }
	e.apiCall("admin", adminPassword, "GET", "/admin/v1/apps/"+other.Key+"/devices/dev-0001", nil, &dev)
	if dev.Device.Flag != 0 {
		t.Fatal("the other app's device was changed")
	}
}

func TestUnknownApp(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.loginAdmin()
	b.get("/console/apps/nope").want(t, http.StatusNotFound, `id="error-message">app &#34;nope&#34; not found<`)
	b.get("/console/nothing/here").want(t, http.StatusNotFound, `id="error-page"`)
}

func TestCreateApp(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.loginAdmin()
	b.get("/console/apps")
	p := b.post("/console/apps", url.Values{"name": {"greenhouse"}})
	p.want(t, 200, `id="app-created"`, "App greenhouse created.")
	key, secret := p.text("app-created-key"), p.text("app-created-secret")
	if len(key) != 24 || len(secret) != 32 {
		t.Fatalf("created key %q secret %q", key, secret)
	}
	e.apiCall(key, secret, "GET", "/admin/v1/apps/"+key, nil, nil) // the credentials work
	if !strings.Contains(p.body, `data-app="`+key+`"`) {
		t.Error("the new app is not listed")
	}
	// Shown once.
	if p := b.get("/console/apps"); p.has(secret) {
		t.Error("the master secret is shown again")
	}
	// The API's validation, shown as is.
	p = b.post("/console/apps", url.Values{"name": {""}})
	p.want(t, 200, `id="flash"`)
	if got := p.text("flash-message"); got != "name must be 1 to 64 bytes" {
		t.Errorf("flash %q", got)
	}
}

func TestAppSecretRevealAndRotate(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key

	b.post(base+"/secret/reveal", nil).want(t, 200, "Tick the box")
	p := b.post(base+"/secret/reveal", url.Values{"confirm": {"1"}})
	if got := p.text("secret-value"); got != a.Secret {
		t.Fatalf("revealed %q, want %q", got, a.Secret)
	}
	if p := b.get(base); p.has(a.Secret) {
		t.Fatal("the secret is shown again after a reload")
	}

	p = b.post(base+"/secret/rotate", url.Values{"confirm": {"not-the-key"}})
	if got := p.text("flash-message"); got != "confirm must equal the app key" {
		t.Fatalf("flash %q", got)
	}
	p = b.post(base+"/secret/rotate", url.Values{"confirm": {a.Key}})
	p.want(t, 200, "Master secret rotated")
	fresh := p.text("secret-value")
	if len(fresh) != 32 || fresh == a.Secret {
		t.Fatalf("new secret %q", fresh)
	}
	// The owner's session follows the rotation.
	b.get(base+"/devices").want(t, 200, `id="devices-table"`)
	e.apiCall(a.Key, fresh, "GET", "/admin/v1/apps/"+a.Key, nil, nil)

	// Another owner session with the old secret ends at its next call.
	t.Run("stale session", func(t *testing.T) {
		old := e.browser()
		old.loginApp(app{a.Name, a.Key, fresh})
		b.post(base+"/secret/rotate", url.Values{"confirm": {a.Key}}).want(t, 200, "Master secret rotated")
		if p := old.get(base); p.url != "/console/login?expired=1" {
			t.Fatalf("a session with a rotated secret went to %s", p.url)
		}
	})
}

func TestRateLimits(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginAdmin()
	base := "/console/apps/" + a.Key
	b.get(base)
	p := b.post(base+"/ratelimits", url.Values{"create": {"10"}, "property": {"0"}, "message": {""}, "query": {"250"}})
	p.want(t, 200, "Rate limits saved")
	var got map[string]int
	e.apiCall("admin", adminPassword, "GET", "/admin/v1/apps/"+a.Key+"/ratelimits", nil, &got)
	if want := map[string]int{"create": 10, "property": 0, "message": 1000, "query": 250}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limits %v, want %v", got, want)
	}
	if !strings.Contains(p.body, `id="ratelimit-create" name="create" type="number" min="0" max="1000000" step="1" value="10"`) {
		t.Error("the form does not show the stored limit")
	}
	p = b.post(base+"/ratelimits", url.Values{"create": {"lots"}})
	p.want(t, 200, "The create limit must be a whole number")

	// An app owner sees them read-only, without a submit button.
	o := e.browser()
	p = o.loginApp(a)
	if p.has(`id="ratelimits-submit"`) || !p.has("Only the admin can change them.") {
		t.Error("an app owner is offered to change rate limits")
	}
}

func TestPropertyModel(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key
	model := func() string {
		var out struct{ Properties any }
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/properties", nil, &out)
		return fmt.Sprint(out.Properties)
	}
	p := b.post(base+"/properties/add", url.Values{"name": {"temp"}, "type": {"double"}, "min": {"-40"}, "max": {"85.5"}})
	p.want(t, 200, "Property temp added.", `data-property="temp"`)
	b.post(base+"/properties/add", url.Values{"name": {"mode"}, "type": {"string"}, "max_length": {"16"}}).want(t, 200, "Property mode added.")
	if got := model(); got != "[map[max:85.5 min:-40 name:temp type:double] map[max_length:16 name:mode type:string]]" {
		t.Fatalf("model %s", got)
	}
	b.post(base+"/properties/add", url.Values{"name": {"temp"}, "type": {"int"}}).want(t, 200, "already; change it in the table")
	// The API's rules, with its message.
	p = b.post(base+"/properties/add", url.Values{"name": {"bad"}, "type": {"string"}, "min": {"1"}})
	if p.text("flash-message") == "" || !p.has("flash-error") {
		t.Fatalf("min on a string was accepted:\n%s", p.body)
	}
	b.post(base+"/properties/add", url.Values{"name": {"x"}, "type": {"int"}, "min": {"ten"}}).want(t, 200, "Min must be a number")

	b.post(base+"/properties/update", url.Values{"orig": {"temp"}, "name": {"temperature"}, "type": {"int"}, "min": {"-40"}, "max": {""}}).
		want(t, 200, "Property temperature saved.")
	b.post(base+"/properties/remove", url.Values{"name": {"mode"}}).want(t, 200, "Property mode removed.")
	if got := model(); got != "[map[min:-40 name:temperature type:int]]" {
		t.Fatalf("model %s", got)
	}
}

func TestBatchCreateFromList(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "taken-01")
	b := e.browser()
	b.loginAdmin() // an admin session: the console fetches the app's secret
	base := "/console/apps/" + a.Key
	b.get(base + "/devices")
	p := b.post(base+"/devices", url.Values{"list": {"dev-0001, kitchen\r\n\r\nx\ndev-0002\ndev-0001\ntaken-01\n"}})
	p.want(t, 200, `id="devices-create-results"`)
	if got := p.text("devices-create-summary"); !strings.HasPrefix(got, "2 created, 3 failed") {
		t.Errorf("summary %q", got)
	}
	rows := resultRows(p)
	want := []string{"1 dev-0001 0 created", "3 x 1003 device name", "4 dev-0002 0 created", "5 dev-0001 3001", "6 taken-01 3001"}
	if len(rows) != len(want) {
		t.Fatalf("rows %q", rows)
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w) {
			t.Errorf("row %d: %q, want prefix %q", i, rows[i], w)
		}
	}
	// The created ones show their secret, which works.
	secrets := regexp.MustCompile(`class="result-secret"><code>([A-Za-z0-9]{32})</code>`).FindAllStringSubmatch(p.body, -1)
	if len(secrets) != 2 {
		t.Fatalf("%d secrets shown", len(secrets))
	}
	var base1 struct {
		Secret string `json:"device_secret"`
	}
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &base1)
	if base1.Secret != secrets[0][1] {
		t.Errorf("shown secret %q, stored %q", secrets[0][1], base1.Secret)
	}
	var dev struct{ Device struct{ Mark string } }
	e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/devices/dev-0001", nil, &dev)
	if dev.Device.Mark != "kitchen" {
		t.Errorf("mark %q", dev.Device.Mark)
	}
	// Shown once.
	p = b.get(base + "/devices")
	if p.has(secrets[0][1]) || p.has(`id="devices-create-results"`) {
		t.Error("the results are shown again")
	}
	p.want(t, 200, `data-device="dev-0001"`, `data-device="dev-0002"`)

	b.post(base+"/devices", url.Values{"list": {"\n \n"}}).want(t, 200, "Paste device names")
}

// resultRows returns the batch results' cells, space separated, per row.
func resultRows(p page) []string {
	tbody := p.body[strings.Index(p.body, `id="devices-create-results"`):]
	tbody = tbody[:strings.Index(tbody, "</table>")]
	var rows []string
	for _, tr := range regexp.MustCompile(`(?s)<tr data-device.*?</tr>`).FindAllString(tbody, -1) {
		cells := regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(tr, -1)
		var parts []string
		for _, c := range cells {
			parts = append(parts, strings.TrimSpace(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], "")))
		}
		rows = append(rows, strings.Join(parts, " "))
	}
	return rows
}

func TestBatchCreateFromCSV(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key
	b.get(base + "/devices")
	csv := "\xef\xbb\xbfname,mark\ncsv-0001,a\n\"csv-0002\",\"hall, upstairs\"\n\ncsv-0003,x,y\n"
	p := b.upload(base+"/devices", nil, "file", "devices.csv", csv)
	p.want(t, 200, `id="devices-create-results"`, "devices.csv")
	rows := resultRows(p)
	want := []string{"2 csv-0001 0 created", "3 csv-0002 0 created", "5 csv-0003 1003 expected name,mark; this line has 3 fields"}
	if len(rows) != len(want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w) {
			t.Errorf("row %d: %q, want prefix %q", i, rows[i], w)
		}
	}
	var dev struct{ Device struct{ Mark string } }
	e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/devices/csv-0002", nil, &dev)
	if dev.Device.Mark != "hall, upstairs" {
		t.Errorf("mark %q", dev.Device.Mark)
	}
	// A list and a file in one submission.
	p = b.upload(base+"/devices", map[string]string{"list": "both-0001"}, "file", "more.csv", "both-0002\n")
	if got := p.text("devices-create-summary"); !strings.HasPrefix(got, "2 created, 0 failed") {
		t.Errorf("summary %q", got)
	}
}

func TestDeviceListPaging(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	var names []string
	for i := range 120 {
		names = append(names, fmt.Sprintf("dev-%04d", i))
	}
	e.createDevices(a, names...)
	e.createDevices(a, "other-01")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key + "/devices"
	p := b.get(base)
	if n := strings.Count(p.body, `<tr data-device=`); n != devicesPerPage {
		t.Fatalf("first page has %d devices", n)
	}
	next := regexp.MustCompile(`id="devices-next" href="([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil {
		t.Fatal("no next page link")
	}
	p = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	p.want(t, 200, `data-device="dev-0050"`, `id="devices-first"`)
	if p.has(`data-device="dev-0049"`) {
		t.Error("the second page repeats the first")
	}
	p = b.get(base + "?prefix=other")
	if n := strings.Count(p.body, `<tr data-device=`); n != 1 || !p.has(`data-device="other-01"`) || p.has(`id="devices-next"`) {
		t.Errorf("prefix search: %d rows:\n%s", n, p.body)
	}
	p = b.get(base + "?prefix=nothing")
	p.want(t, 200, `id="devices-empty"`)
}

func TestDevicePageAndDesiredProperty(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginAdmin()
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	p := b.get(dev)
	p.want(t, 200, `id="device-properties"`)
	if p.text("device-status") != "offline" || p.text("device-flag") != "enabled" || p.text("device-last-login") != "never" || p.text("device-desired-version") != "1" {
		t.Fatalf("base info: status %q flag %q login %q version %q", p.text("device-status"), p.text("device-flag"), p.text("device-last-login"), p.text("device-desired-version"))
	}
	p = b.post(dev+"/property", url.Values{"name": {"temp"}, "value": {"21.5"}, "version": {"1"}})
	p.want(t, 200, "Desired temp set (version 1", `data-property="temp"`)
	if p.text("device-desired-version") != "2" {
		t.Errorf("version after a set: %q", p.text("device-desired-version"))
	}
	b.post(dev+"/property", url.Values{"name": {"mode"}, "value": {"eco"}, "version": {"2"}})
	b.post(dev+"/property", url.Values{"name": {"code"}, "value": {"42"}, "version": {"3"}, "as_string": {"1"}})
	// A stale version is the API's 6003, explained.
	p = b.post(dev+"/property", url.Values{"name": {"temp"}, "value": {"1"}, "version": {"1"}})
	p.want(t, 200, "Not applied: 6003 version invalid.")

	var out struct {
		Properties []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"desired_value"`
		}
	}
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/property?device_name=dev-0001", nil, &out)
	raw := map[string]string{}
	for _, p := range out.Properties {
		raw[p.Name] = string(p.Value)
	}
	if want := map[string]string{"temp": "21.5", "mode": `"eco"`, "code": `"42"`}; fmt.Sprint(raw) != fmt.Sprint(want) {
		t.Errorf("desired values %v, want %v", raw, want)
	}
	p = b.get(dev)
	if !strings.Contains(p.body, `<td class="prop-desired"><code>&#34;eco&#34;</code></td>`) {
		t.Errorf("the property table does not show the string value as JSON:\n%s", p.body)
	}
}

func TestDeviceFlagAndDelete(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	b.get(dev)
	p := b.post(dev+"/flag", url.Values{"flag": {"1"}})
	p.want(t, 200, "Device disabled", `id="device-enable"`)
	if p.text("device-flag") != "disabled" {
		t.Errorf("flag %q", p.text("device-flag"))
	}
	b.post(dev+"/flag", url.Values{"flag": {"0"}}).want(t, 200, "Device enabled.", `id="device-disable"`)

	b.post(dev+"/delete", nil).want(t, 200, "Tick the box to confirm")
	p = b.post(dev+"/delete", url.Values{"confirm": {"1"}})
	if p.url != "/console/apps/"+a.Key+"/devices" {
		t.Fatalf("after delete: %s", p.url)
	}
	p.want(t, 200, "Device dev-0001 deleted.")
	b.get(dev).want(t, http.StatusNotFound, `device &#34;dev-0001&#34; not found`)
}

func TestMessageAndTrace(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginAdmin()
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	b.get(dev)
	p := b.post(dev+"/message", url.Values{"msg_body": {"hello"}, "ttl": {"3600"}})
	p.want(t, 200, "Message stored; msgid")
	msgid := p.text("device-message-msgid")
	if n, err := strconv.ParseInt(msgid, 10, 64); err != nil || n <= 0 || n > 1<<53-1 {
		t.Fatalf("msgid %q", msgid)
	}
	link := regexp.MustCompile(`id="device-message-trace" href="([^"]+)"`).FindStringSubmatch(p.body)
	if link == nil || link[1] != "/console/apps/"+a.Key+"/messages?msgid="+msgid {
		t.Fatalf("trace link %v", link)
	}
	p = b.get(link[1])
	p.want(t, 200, `id="trace-records"`, `id="trace-retract"`)
	if p.text("trace-state") != "pending" || p.text("trace-device") != "dev-0001" {
		t.Errorf("state %q device %q", p.text("trace-state"), p.text("trace-device"))
	}
	if types := regexp.MustCompile(`class="record-type">([^<]+)<`).FindAllStringSubmatch(p.body, -1); len(types) != 2 ||
		types[0][1] != "0 target valid" || types[1][1] != "2 submission success" {
		t.Errorf("records %v", types)
	}

	p = b.post("/console/apps/"+a.Key+"/messages/retract", url.Values{"msgid": {msgid}})
	p.want(t, 200, "Message retracted")
	if p.text("trace-state") != "retracted" || p.has(`id="trace-retract"`) {
		t.Errorf("after retracting: state %q", p.text("trace-state"))
	}
	// Retracting again is refused with record 8 and its reason.
	p = b.post("/console/apps/"+a.Key+"/messages/retract", url.Values{"msgid": {msgid}})
	p.want(t, 200, "Not retracted", "(record 8)")

	// A bad msgid is shown by the form, not as an error page.
	p = b.get("/console/apps/" + a.Key + "/messages?msgid=12x")
	p.want(t, 200, `id="trace-error"`)
	b.post(dev+"/message", url.Values{"msg_body": {""}}).want(t, 200, `class="flash flash-error"`)
}

func TestCallbacks(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("echostr"))
	}))
	defer echo.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key + "/callbacks"
	settings := func() (s struct {
		Enabled bool
		Types   []int
	}) {
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/callback", nil, &s)
		return s
	}

	t.Run("switch", func(t *testing.T) {
		p := b.get(base)
		if p.text("callback-state") != "off" || p.text("callback-switch-submit") != "Turn callbacks on" {
			t.Fatalf("state %q button %q", p.text("callback-state"), p.text("callback-switch-submit"))
		}
		p = b.post(base+"/switch", url.Values{"enabled": {"1"}})
		if p.text("callback-state") != "on" || !settings().Enabled {
			t.Fatal("the switch did not turn on")
		}
		p = b.post(base+"/switch", url.Values{"enabled": {"0"}})
		if p.text("callback-state") != "off" || settings().Enabled {
			t.Fatal("the switch did not turn off")
		}
	})
	t.Run("types", func(t *testing.T) {
		p := b.post(base+"/types", url.Values{"types": {"5", "4", "6"}})
		p.want(t, 200, "Record types saved.", `id="callback-type-4" name="types" type="checkbox" value="4" checked`)
		if p.has(`value="0" checked`) || !slices.Equal(settings().Types, []int{4, 5, 6}) {
			t.Errorf("types %v", settings().Types)
		}
		b.post(base+"/types", nil)
		if got := settings().Types; len(got) != 0 {
			t.Errorf("no box ticked: types %v", got)
		}
	})
	t.Run("urls", func(t *testing.T) {
		p := b.post(base+"/urls/add", url.Values{"url": {echo.URL + "/cb"}})
		p.want(t, 200, "Verified and added", `data-url="`+echo.URL+`/cb"`, "url-default")
		p = b.post(base+"/urls/add", url.Values{"url": {broken.URL + "/cb"}})
		p.want(t, 200, "verification failed", "HTTP 404")
		p = b.post(base+"/urls/add", url.Values{"url": {"ftp://example.com/x"}})
		p.want(t, 200, "callback URL must begin with http:// or https://")

		second := echo.URL + "/second?x=1&y=2"
		b.post(base+"/urls/add", url.Values{"url": {second}}).want(t, 200, "Verified and added")
		b.post(base+"/urls/test", url.Values{"url": {second}}).want(t, 200, "Test passed")
		b.post(base+"/urls/delete", url.Values{"url": {echo.URL + "/cb"}}).want(t, 200, "the default URL cannot be deleted")
		b.post(base+"/urls/default", url.Values{"url": {second}}).want(t, 200, "is now the default URL.")
		p = b.post(base+"/urls/delete", url.Values{"url": {echo.URL + "/cb"}})
		p.want(t, 200, "Deleted "+echo.URL+"/cb")
		var urls struct{ URLs []struct{ URL string } }
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/callback/urls", nil, &urls)
		if len(urls.URLs) != 1 || urls.URLs[0].URL != second {
			t.Errorf("urls %+v", urls)
		}
	})
	t.Run("deliveries and dead letters", func(t *testing.T) {
		e.events.d = []callback.Delivery{
			{Time: time.Unix(1_790_000_100, 0), URL: echo.URL + "/cb", Records: 3, Attempt: 1, Status: 503, LatencyMS: 12.5, Error: "HTTP 503"},
		}
		err := e.st.PutDeadLetter(t.Context(), store.DeadLetter{
			ID: "7", AppKey: a.Key, URL: echo.URL + "/cb", Attempts: 4, LastError: "HTTP 503", Time: 1_790_000_200,
			Entries: []store.OutboxEntry{{Seq: 7, ID: "123-0", AppKey: a.Key, Record: store.Record{Type: 4, MsgID: "123", UserID: "dev-0001"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		p := b.get(base)
		p.want(t, 200, `<td class="num delivery-status">503</td>`, `<td class="num">12.5</td>`, `data-id="7"`, `id="deadletter-7-redeliver"`)
		p = b.post(base+"/deadletters/7/redeliver", nil)
		p.want(t, 200, "Dead letter 7 queued again (1 records).")
		if p.has(`data-id="7"`) {
			t.Error("the redelivered dead letter is still listed")
		}
		b.post(base+"/deadletters/7/redeliver", nil).want(t, 200, `dead letter &#34;7&#34; not found`)
	})
}

func TestOverviewMetrics(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	records := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRecords}, []string{"app", "type"})
	connected := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricConnected})
	backlog := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricBacklog}, []string{"app"})
	e.reg.MustRegister(records, connected, backlog)
	connected.Set(3)
	backlog.WithLabelValues(a.Key).Set(6)
	records.WithLabelValues(a.Key, "0").Add(4) // accepted sends
	records.WithLabelValues(a.Key, "1").Add(1) // a send to a disabled device
	records.WithLabelValues(a.Key, "4").Add(2)
	records.WithLabelValues(a.Key, "5").Add(1)

	b := e.browser()
	p := b.loginAdmin()
	if p.text("overview-connected") != "3" || p.text("overview-sent") != "5" || p.text("overview-delivered") != "2" ||
		p.text("overview-failed") != "2" || p.text("overview-window") != "since start" || p.text("overview-backlog") != "6" {
		t.Fatalf("overview: connected %q sent %q delivered %q failed %q window %q backlog %q",
			p.text("overview-connected"), p.text("overview-sent"), p.text("overview-delivered"), p.text("overview-failed"),
			p.text("overview-window"), p.text("overview-backlog"))
	}
	if !regexp.MustCompile(`data-app="` + a.Key + `">(?s:.*?)class="app-backlog num">6<`).MatchString(p.body) {
		t.Error("the app's backlog is not in its row")
	}
	// An hour of samples, one a minute.
	for range samplesKept {
		records.WithLabelValues(a.Key, "0").Add(2)
		e.c.metrics.sample(e.c.log)
	}
	records.WithLabelValues(a.Key, "0").Add(1) // since the last sample
	p = b.get("/console/")
	if p.text("overview-window") != "last hour" || p.text("overview-sent") != "121" {
		t.Fatalf("after an hour: window %q sent %q", p.text("overview-window"), p.text("overview-sent"))
	}

	o := e.browser()
	p = o.loginApp(a)
	p = o.get("/console/")
	if got := p.text("overview-backlog"); got != "6" {
		t.Errorf("owner's backlog %q", got)
	}
}

func TestClose(t *testing.T) {
	e := newEnv(t)
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
}

// TestRecentMessages lists an app's messages newest first, 50 a page, each
// linking to its trace.
func TestRecentMessages(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	other := e.createApp("orchard")
	e.createDevices(a, "dev-0001", "dev-0002")
	e.createDevices(other, "dev-0001")
	var ids []string
	for i := range messagesPerPage + 10 {
		var out struct {
			MsgID int64 `json:"msgid"`
		}
		ttl := 60 * (i % 2) // ttl 0 to an offline device fails at once
		e.apiCall(a.Key, a.Secret, "POST", "/msg/v1/msg", map[string]any{"seq_no": i + 1, "device_name": fmt.Sprintf("dev-000%d", i%2+1), "msg_body": "m", "ttl": ttl}, &out)
		ids = append(ids, fmt.Sprint(out.MsgID))
	}
	e.apiCall(other.Key, other.Secret, "POST", "/msg/v1/msg", map[string]any{"seq_no": 1, "device_name": "dev-0001", "msg_body": "elsewhere"}, nil)
	b := e.browser()
	b.loginApp(a)
	list := "/console/apps/" + a.Key + "/messages"
	p := b.get(list)
	rows := regexp.MustCompile(`<tr data-msgid="(\d+)">`).FindAllStringSubmatch(p.body, -1)
	if len(rows) != messagesPerPage || rows[0][1] != ids[len(ids)-1] || rows[1][1] != ids[len(ids)-2] {
		t.Fatalf("first page: %d rows starting %v, want %d newest first", len(rows), rows[:min(2, len(rows))], messagesPerPage)
	}
	newest := regexp.MustCompile(`(?s)<tr data-msgid="` + ids[len(ids)-1] + `">.*?</tr>`).FindString(p.body)
	for _, want := range []string{`href="/console/apps/` + a.Key + `/messages?msgid=` + ids[len(ids)-1] + `"`, "dev-0002", "state-pending", "<time datetime="} {
		if !strings.Contains(newest, want) {
			t.Errorf("the newest row lacks %q:\n%s", want, newest)
		}
	}
	if row := regexp.MustCompile(`(?s)<tr data-msgid="` + ids[len(ids)-2] + `">.*?</tr>`).FindString(p.body); !strings.Contains(row, "state-failed") {
		t.Errorf("a ttl-0 message to an offline device shows as:\n%s", row)
	}
	next := regexp.MustCompile(`id="messages-next" href="([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil {
		t.Fatal("no link to older messages")
	}
	p = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	p.want(t, 200, `id="messages-first"`)
	rows = regexp.MustCompile(`<tr data-msgid="(\d+)">`).FindAllStringSubmatch(p.body, -1)
	if len(rows) != 10 || rows[9][1] != ids[0] || p.has(`id="messages-next"`) {
		t.Fatalf("second page: %d rows %v", len(rows), rows)
	}
	p = b.get(list + "?msgid=" + ids[0])
	p.want(t, 200, `id="trace-records"`, `id="messages-all"`)
	if p.has(`id="messages-table"`) {
		t.Error("the trace page also lists messages")
	}
	// Another app's owner sees only theirs.
	o := e.browser()
	o.loginApp(other)
	p = o.get("/console/apps/" + other.Key + "/messages")
	if n := strings.Count(p.body, `<tr data-msgid=`); n != 1 {
		t.Errorf("the other app lists %d messages", n)
	}
	e2 := newEnv(t)
	a2 := e2.createApp("empty")
	b2 := e2.browser()
	b2.loginApp(a2)
	b2.get("/console/apps/"+a2.Key+"/messages").want(t, 200, `id="messages-empty"`)
}

// TestLongPropertyFolded: a long value shows its first bytes with the
// whole value in a <details>; a short one is shown as is.
func TestLongPropertyFolded(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	long := strings.Repeat("é", 30) + strings.Repeat("x", 200)
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/property", map[string]any{"seq_no": 1, "device_name": "dev-0001", "version": 1,
		"properties": []map[string]any{{"name": "blob", "value": long}, {"name": "led", "value": "on"}}}, nil)
	b := e.browser()
	b.loginApp(a)
	p := b.get("/console/apps/" + a.Key + "/devices/dev-0001")
	row := regexp.MustCompile(`(?s)<tr data-property="blob">.*?</tr>`).FindString(p.body)
	// 40 bytes: the opening quote and 19 two-byte runes, never half a rune.
	want := `<details class="fold"><summary><code>&#34;` + strings.Repeat("é", 19) + `</code>… <span class="hint">(262 bytes)</span></summary><code class="fold-full">&#34;` + long + `&#34;</code></details>`
	if !strings.Contains(row, want) {
		t.Errorf("the long value is not folded as expected:\n%s\nwant %s", row, want)
	}
	if !p.has(`<td class="prop-desired"><code>&#34;on&#34;</code></td>`) {
		t.Errorf("a short value is folded:\n%s", regexp.MustCompile(`(?s)<tr data-property="led">.*?</tr>`).FindString(p.body))
	}
}

// TestMessageBoxBytes: the form counts bytes (data-max-bytes), not UTF-16
// units (maxlength), and line breaks reach the device as \n.
func TestMessageBoxBytes(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	p := b.get(dev)
	box := regexp.MustCompile(`<textarea id="device-message-body"[^>]*>`).FindString(p.body)
	if !strings.Contains(box, `data-max-bytes="2048"`) || strings.Contains(box, "maxlength") {
		t.Errorf("message box %s: want data-max-bytes=2048 and no maxlength", box)
	}
	p = b.post(dev+"/message", url.Values{"msg_body": {"line 1\r\nline 2"}, "ttl": {"60"}})
	p.want(t, 200, "Message stored; msgid")
	var id int64
	fmt.Sscan(p.text("device-message-msgid"), &id)
	m, err := e.st.GetMessage(context.Background(), a.Key, id)
	if err != nil || m.Body != "line 1\nline 2" {
		t.Fatalf("stored body %q (%v), want the line break as \\n", m.Body, err)
	}
	// 2048 bytes of two-byte runes pass; one more rune is the API's error.
	b.post(dev+"/message", url.Values{"msg_body": {strings.Repeat("é", 1024)}}).want(t, 200, "Message stored; msgid")
	b.post(dev+"/message", url.Values{"msg_body": {strings.Repeat("é", 1025)}}).want(t, 200, "msg_body must be 1 to 2048 bytes, got 2050")
}

// A refusal whose text merely contains "not found" is not an unknown
// thing: the console tells them apart by the API's typed error, not its
// words.
func TestRefusalMentioningNotFoundIsNotA404(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginApp(a)
	p := b.get("/console/apps/" + a.Key + "/callbacks?cursor=" + url.QueryEscape("not found"))
	p.want(t, http.StatusBadRequest, `cursor must be the next value of a previous page, got &#34;not found&#34;`)
}

func TestDeviceTags(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	if p := b.get(dev); p.text("device-tags") != "—" {
		t.Fatalf("tags of an untagged device %q", p.text("device-tags"))
	}
	p := b.post(dev+"/tags", url.Values{"tags": {"lamp, floor:1  lamp"}})
	p.want(t, 200, "Tags saved", `value="floor:1 lamp"`)
	if got := p.text("device-tags"); !strings.Contains(got, "floor:1") || !strings.Contains(got, "lamp") {
		t.Errorf("tags shown %q", got)
	}
	var info struct{ Tags []string }
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &info)
	if fmt.Sprint(info.Tags) != "[floor:1 lamp]" {
		t.Errorf("stored tags %v", info.Tags)
	}
	b.post(dev+"/tags", url.Values{"tags": {"a/b"}}).want(t, 200, "tags[0]")
	b.post(dev+"/tags", url.Values{"tags": {""}}).want(t, 200, "Tags saved (0)")
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &info)
	if len(info.Tags) != 0 {
		t.Errorf("tags after clearing %v", info.Tags)
	}
}

func TestBroadcastPage(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/devices", map[string]any{"device": []map[string]any{
		{"name": "lamp-0001", "tags": []string{"lamp"}}, {"name": "lamp-0002", "tags": []string{"lamp"}}, {"name": "plug-0001"},
	}}, nil)
	b := e.browser()
	b.loginApp(a)
	page := "/console/apps/" + a.Key + "/broadcast"
	b.get(page).want(t, 200, `id="broadcast-form"`, `id="nav-broadcast"`)
	b.post(page, url.Values{"target": {"tag"}, "tag": {""}, "msg_body": {"x"}}).want(t, 200, "Name a tag")
	b.post(page, url.Values{"target": {"tag"}, "tag": {"a b"}, "msg_body": {"x"}}).want(t, 200, "target.tag")
	p := b.post(page, url.Values{"target": {"tag"}, "tag": {"lamp"}, "msg_body": {"refresh"}, "ttl": {"600"}})
	p.want(t, 200, "accepted for 2 devices", `id="broadcast-progress"`, `data-live="2"`, `id="broadcast-bar-queued"`)
	if !strings.Contains(p.url, "?id=") {
		t.Fatalf("after the form: %s", p.url)
	}
	id := p.text("broadcast-id")
	p = b.post(page+"/cancel", url.Values{"id": {id}})
	p.want(t, 200, "Broadcast cancelled")
	if p.text("broadcast-state") != "cancelled" {
		t.Errorf("state after cancel %q", p.text("broadcast-state"))
	}
	if p.has(`id="broadcast-cancel"`) {
		t.Error("a cancelled broadcast still offers the cancel button")
	}
	b.get(page+"?id=12345").want(t, 200, "broadcast 12345 not found")
	all := b.post(page, url.Values{"target": {"all"}, "msg_body": {"all"}})
	all.want(t, 200, "accepted for 3 devices")
}
