package console

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

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
	if want := map[string]int{"create": 10, "property": 0, "message": 1000, "query": 250, "command": 1000}; fmt.Sprint(got) != fmt.Sprint(want) {
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
