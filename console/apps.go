package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
)

// rateCategories are the rate-limit categories, in the order shown.
var rateCategories = []string{"create", "property", "message", "query"}

type appRow struct {
	apitypes.AppSummary
	Backlog    float64
	HasBacklog bool
}

type overviewData struct {
	Metrics    overview
	HasMetrics bool
	MetricsErr string
	Apps       []appRow      // the admin's view
	App        *apitypes.App // an app owner's view
	Backlog    float64
	HasBacklog bool
}

// DeviceTotal is the devices of every app the admin sees.
func (d overviewData) DeviceTotal() int64 {
	var n int64
	for _, a := range d.Apps {
		n += a.Devices
	}
	return n
}

func (c *Console) overviewPage(q *req) error {
	var d overviewData
	own := "" // an app owner sees their app's figures
	if !q.s.admin {
		own = q.s.appKey
	}
	ov, ok, err := c.metrics.overview(own)
	if err != nil {
		c.log.Warn("console: read metrics", "err", err)
		d.MetricsErr = "The metrics could not be read."
	}
	d.Metrics, d.HasMetrics = ov, ok
	backlog := func(key string) (float64, bool) {
		v, ok := ov.Backlog[key]
		return v, ok
	}
	if q.s.admin {
		var list apitypes.AppList
		if err := q.api(http.MethodGet, "/admin/v1/apps", nil, nil, &list); err != nil {
			return err
		}
		for _, a := range list.Apps {
			row := appRow{AppSummary: a}
			row.Backlog, row.HasBacklog = backlog(a.Key)
			d.Apps = append(d.Apps, row)
		}
		return q.render(http.StatusOK, "overview", "Overview", "overview", d)
	}
	q.key = q.s.appKey
	var app apitypes.App
	if err := q.api(http.MethodGet, q.appPath(""), nil, nil, &app); err != nil {
		return err
	}
	app.MasterSecret = "" // never rendered here
	d.App = &app
	d.Backlog, d.HasBacklog = backlog(app.Key)
	return q.render(http.StatusOK, "overview", "Overview", "overview", d)
}

func (c *Console) appsPage(q *req) error {
	if !q.s.admin {
		http.Redirect(q.w, q.r, Prefix+"apps/"+url.PathEscape(q.s.appKey), http.StatusSeeOther)
		return nil
	}
	var list apitypes.AppList
	if err := q.api(http.MethodGet, "/admin/v1/apps", nil, nil, &list); err != nil {
		return err
	}
	return q.render(http.StatusOK, "apps", "Apps", "apps", list)
}

func (c *Console) createApp(q *req) (string, error) {
	back := Prefix + "apps"
	var out apitypes.CreatedApp
	err := q.api(http.MethodPost, "/admin/v1/apps", nil, apitypes.CreateAppRequest{Name: strings.TrimSpace(q.r.PostFormValue("name"))}, &out)
	if err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{
		Kind:    "ok",
		Message: "App " + out.Name + " created. Copy its master secret now: it is not shown again unless revealed.",
		NewApp:  &newApp{out.Name, out.Key, out.MasterSecret},
	})
	return back, nil
}

type appPageData struct {
	App        apitypes.App
	RateLimits []rateLimit
	Model      []apitypes.PropertyDef
	Types      []string
}

type rateLimit struct {
	Category string
	Value    int
}

func (c *Console) appPage(q *req) error {
	var app apitypes.App
	if err := q.api(http.MethodGet, q.appPath(""), nil, nil, &app); err != nil {
		return err
	}
	app.MasterSecret = "" // shown only through Reveal
	var limits apitypes.RateLimits
	if err := q.api(http.MethodGet, q.appPath("/ratelimits"), nil, nil, &limits); err != nil {
		return err
	}
	var model apitypes.PropertyModel
	if err := q.api(http.MethodGet, q.appPath("/properties"), nil, nil, &model); err != nil {
		return err
	}
	d := appPageData{App: app, Model: model.Properties, Types: []string{"int", "double", "string"}}
	for _, cat := range rateCategories {
		d.RateLimits = append(d.RateLimits, rateLimit{cat, limits[cat]})
	}
	return q.render(http.StatusOK, "app", "App "+app.Name, "app", d)
}

func (c *Console) revealSecret(q *req) (string, error) {
	back := q.consolePath("")
	if q.r.PostFormValue("confirm") == "" {
		return back, userErrorf("Tick the box to confirm that you want to see the master secret.")
	}
	var app apitypes.App
	if err := q.api(http.MethodGet, q.appPath(""), nil, nil, &app); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "The master secret of " + app.Name + ":", Secret: app.MasterSecret})
	return back, nil
}

func (c *Console) rotateSecret(q *req) (string, error) {
	back := q.consolePath("")
	var out apitypes.MasterSecret
	err := q.api(http.MethodPost, q.appPath("/master_secret"), nil,
		apitypes.RotateSecretRequest{Confirm: strings.TrimSpace(q.r.PostFormValue("confirm"))}, &out)
	if err != nil {
		return back, err
	}
	// The old secret no longer works: an owner rotating their own app
	// keeps their session with the new one.
	if !q.s.admin && q.s.appKey == out.Key {
		c.setCreds(q.s.id, creds{out.Key, out.MasterSecret})
	}
	c.setFlash(q.s.id, &flash{
		Kind:    "ok",
		Message: "Master secret rotated: the old one no longer works. Give the new one to the app's servers now.",
		Secret:  out.MasterSecret,
	})
	return back, nil
}

func (c *Console) setRateLimits(q *req) (string, error) {
	back := q.consolePath("")
	body := apitypes.RateLimitChanges{}
	for _, cat := range rateCategories {
		v := strings.TrimSpace(q.r.PostFormValue(cat))
		if v == "" {
			continue // unchanged
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return back, userErrorf("The %s limit must be a whole number of requests per second (0 for unlimited), not %q.", cat, v)
		}
		body[cat] = n
	}
	if err := q.api(http.MethodPut, q.appPath("/ratelimits"), nil, body, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Rate limits saved; they apply within a second."})
	return back, nil
}

// numberRE matches a JSON number literal.
var numberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// propFromForm reads a property model entry from a form. Its rules are
// the API's to check; only what JSON cannot carry is refused here.
func propFromForm(r *http.Request) (apitypes.PropertyDef, error) {
	p := apitypes.PropertyDef{
		Name: strings.TrimSpace(r.PostFormValue("name")),
		Type: r.PostFormValue("type"),
	}
	for _, f := range []struct {
		field, label string
		dst          *json.Number
	}{{"min", "Min", &p.Min}, {"max", "Max", &p.Max}, {"max_length", "Max length", &p.MaxLength}} {
		v := strings.TrimSpace(r.PostFormValue(f.field))
		if v == "" {
			continue
		}
		if !numberRE.MatchString(v) {
			return p, userErrorf("%s must be a number, not %q.", f.label, v)
		}
		*f.dst = json.Number(v)
	}
	return p, nil
}

// changeModel reads the app's model, applies change and stores the
// result, which replaces the whole model.
func (q *req) changeModel(change func([]apitypes.PropertyDef) ([]apitypes.PropertyDef, error)) error {
	var model apitypes.PropertyModel
	if err := q.api(http.MethodGet, q.appPath("/properties"), nil, nil, &model); err != nil {
		return err
	}
	props, err := change(model.Properties)
	if err != nil {
		return err
	}
	if props == nil {
		props = []apitypes.PropertyDef{}
	}
	return q.api(http.MethodPut, q.appPath("/properties"), nil, apitypes.PropertyModel{Properties: props}, nil)
}

func (c *Console) addProperty(q *req) (string, error) {
	back := q.consolePath("") + "#properties"
	p, err := propFromForm(q.r)
	if err != nil {
		return back, err
	}
	err = q.changeModel(func(ps []apitypes.PropertyDef) ([]apitypes.PropertyDef, error) {
		if slices.ContainsFunc(ps, func(o apitypes.PropertyDef) bool { return o.Name == p.Name }) {
			return nil, userErrorf("The model has a property %q already; change it in the table.", p.Name)
		}
		return append(ps, p), nil
	})
	if err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Property " + p.Name + " added."})
	return back, nil
}

func (c *Console) updateProperty(q *req) (string, error) {
	back := q.consolePath("") + "#properties"
	orig := q.r.PostFormValue("orig")
	p, err := propFromForm(q.r)
	if err != nil {
		return back, err
	}
	err = q.changeModel(func(ps []apitypes.PropertyDef) ([]apitypes.PropertyDef, error) {
		i := slices.IndexFunc(ps, func(o apitypes.PropertyDef) bool { return o.Name == orig })
		if i < 0 {
			return nil, userErrorf("The model has no property %q (any more).", orig)
		}
		ps[i] = p
		return ps, nil
	})
	if err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Property " + p.Name + " saved."})
	return back, nil
}

func (c *Console) removeProperty(q *req) (string, error) {
	back := q.consolePath("") + "#properties"
	name := q.r.PostFormValue("name")
	err := q.changeModel(func(ps []apitypes.PropertyDef) ([]apitypes.PropertyDef, error) {
		i := slices.IndexFunc(ps, func(o apitypes.PropertyDef) bool { return o.Name == name })
		if i < 0 {
			return nil, userErrorf("The model has no property %q (any more).", name)
		}
		return slices.Delete(ps, i, i+1), nil
	})
	if err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Property " + name + " removed. Values already stored stay."})
	return back, nil
}
