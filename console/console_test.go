package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/restapi"
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

func TestClose(t *testing.T) {
	e := newEnv(t)
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
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
