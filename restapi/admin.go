package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Admin listing limits.
const (
	DefaultDeviceListLimit  = 100
	MaxDeviceListLimit      = 1000
	DefaultMessageListLimit = 100
	MaxMessageListLimit     = 1000
)

func (a *API) adminRoutes(g *gin.RouterGroup) {
	g.POST("/apps", a.wrap(a.createApp))
	g.GET("/apps", a.wrap(a.listApps))
	g.GET("/apps/:key", a.wrap(a.getApp))
	g.POST("/apps/:key/master_secret", a.wrap(a.rotateMasterSecret))
	g.GET("/apps/:key/properties", a.wrap(a.getModel))
	g.PUT("/apps/:key/properties", a.wrap(a.putModel))
	g.GET("/apps/:key/ratelimits", a.wrap(a.getRateLimits))
	g.PUT("/apps/:key/ratelimits", a.wrap(a.putRateLimits))
	g.GET("/apps/:key/devices", a.wrap(a.listDevices))
	g.GET("/apps/:key/devices/:name", a.wrap(a.getDevice))
	g.PATCH("/apps/:key/devices/:name", a.wrap(a.patchDevice))
	g.DELETE("/apps/:key/devices/:name", a.wrap(a.deleteDevice))
	g.GET("/apps/:key/messages", a.wrap(a.listMessages))
	g.GET("/apps/:key/callback", a.wrap(a.getCallback))
	g.PUT("/apps/:key/callback", a.wrap(a.putCallback))
	g.GET("/apps/:key/callback/urls", a.wrap(a.listCallbackURLs))
	g.POST("/apps/:key/callback/urls", a.wrap(a.addCallbackURL))
	g.DELETE("/apps/:key/callback/urls", a.wrap(a.deleteCallbackURL))
	g.POST("/apps/:key/callback/urls/default", a.wrap(a.setDefaultCallbackURL))
	g.POST("/apps/:key/callback/urls/test", a.wrap(a.testCallbackURL))
	g.GET("/apps/:key/callback/deliveries", a.wrap(a.listDeliveries))
	g.GET("/apps/:key/callback/deadletters", a.wrap(a.listDeadLetters))
	g.POST("/apps/:key/callback/deadletters/:id/redeliver", a.wrap(a.redeliverDeadLetter))
	a.eventWebhookRoutes(g)
}

// appParam loads the app named in the path, refusing an app's credentials
// for any app but itself.
func (a *API) appParam(c *gin.Context) (store.App, error) {
	key := c.Param("key")
	if !isAdmin(c) {
		if app := currentApp(c); app.Key == key {
			return app, nil
		}
		return store.App{}, errAuth("authentication failed: these credentials do not grant access to app " + strconv.Quote(key))
	}
	app, err := a.store.GetApp(c.Request.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		return app, errdefs.NotFound("app", key)
	}
	if err != nil {
		return app, fmt.Errorf("load app: %w", err)
	}
	return app, nil
}

// appAndBody is appParam and readBody, for the calls that change an app.
func (a *API) appAndBody(c *gin.Context) (store.App, object, error) {
	app, err := a.appParam(c)
	if err != nil {
		return app, nil, err
	}
	obj, err := readBody(c)
	return app, obj, err
}

func requireAdmin(c *gin.Context) error {
	if !isAdmin(c) {
		return errAuth("authentication failed: this call needs the admin account")
	}
	return nil
}

// createApp serves POST /admin/v1/apps.
func (a *API) createApp(c *gin.Context) error {
	if err := requireAdmin(c); err != nil {
		return err
	}
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	name, _, err := obj.stringField("name", true)
	if err != nil {
		return err
	}
	app, err := a.appSvc.Create(c.Request.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.CreatedApp{Key: app.Key, MasterSecret: app.MasterSecret, Name: app.Name})
}

// listApps serves GET /admin/v1/apps: every app for the admin, only
// itself for an app.
func (a *API) listApps(c *gin.Context) error {
	apps := []store.App{currentApp(c)}
	if isAdmin(c) {
		var err error
		if apps, err = a.store.ListApps(c.Request.Context()); err != nil {
			return fmt.Errorf("list apps: %w", err)
		}
	}
	out := make([]apitypes.AppSummary, len(apps))
	for i, app := range apps {
		n, err := a.store.CountDevices(c.Request.Context(), app.Key)
		if err != nil {
			return fmt.Errorf("count devices of %s: %w", app.Key, err)
		}
		out[i] = apitypes.AppSummary{Name: app.Name, Key: app.Key, CreatedAt: app.CreatedAt, Devices: n}
	}
	return writeJSON(c, apitypes.AppList{Apps: out})
}

// getApp serves GET /admin/v1/apps/{key}: the app with its master secret
// and the rate limits in effect.
func (a *API) getApp(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	n, err := a.store.CountDevices(c.Request.Context(), app.Key)
	if err != nil {
		return fmt.Errorf("count devices of %s: %w", app.Key, err)
	}
	return writeJSON(c, apitypes.App{Name: app.Name, Key: app.Key, MasterSecret: app.MasterSecret, CreatedAt: app.CreatedAt, Devices: n, RateLimits: a.appSvc.RateLimits(app)})
}

// rotateMasterSecret serves POST /admin/v1/apps/{key}/master_secret: a
// new master secret replaces the old one, which this node refuses at
// once (the shared app cache is updated) and other nodes within
// appcache.TTL. The body must repeat the app key as confirm: a call aimed
// at the wrong app fails instead of locking that app's clients out.
func (a *API) rotateMasterSecret(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	confirm, _, err := obj.stringField("confirm", true)
	if err != nil {
		return err
	}
	if confirm != app.Key {
		return errInvalid("confirm must equal the app key")
	}
	app, err = a.appSvc.RotateMasterSecret(c.Request.Context(), app.Key)
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.MasterSecret{Key: app.Key, MasterSecret: app.MasterSecret})
}

func (a *API) getModel(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	return writeJSON(c, modelAnswer(app.Properties))
}

// modelAnswer is a property model as the API shows it: [] for none, each
// bound written as encoding/json writes the stored number.
func modelAnswer(model []store.PropertyDef) apitypes.PropertyModel {
	out := make([]apitypes.PropertyDef, len(model))
	for i, p := range model {
		out[i] = apitypes.PropertyDef{Name: p.Name, Type: p.Type, Min: floatNumber(p.Min), Max: floatNumber(p.Max)}
		if p.MaxLength != nil {
			out[i].MaxLength = json.Number(strconv.Itoa(*p.MaxLength))
		}
	}
	return apitypes.PropertyModel{Properties: out}
}

// floatNumber is f as encoding/json writes a float64, "" for nil.
func floatNumber(f *float64) json.Number {
	if f == nil {
		return ""
	}
	return json.Number(mustJSON(*f))
}

// putModel replaces the app's property model.
func (a *API) putModel(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	if !obj.has("properties") {
		return errMissing("properties")
	}
	var model []store.PropertyDef
	if err := json.Unmarshal(obj["properties"], &model); err != nil {
		return errInvalid("properties must be an array of {name, type, min, max, max_length}: %v", err)
	}
	if err := a.appSvc.SetModel(c.Request.Context(), app.Key, model); err != nil {
		return err
	}
	return writeJSON(c, modelAnswer(model))
}

// getRateLimits serves GET /admin/v1/apps/{key}/ratelimits: requests per
// second per category, 0 meaning unlimited.
func (a *API) getRateLimits(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.RateLimits(a.appSvc.RateLimits(app)))
}

// putRateLimits sets some or all categories' limits; only the admin may
// change them.
func (a *API) putRateLimits(c *gin.Context) error {
	if err := requireAdmin(c); err != nil {
		return err
	}
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	changes := make(map[string]int64, len(obj))
	for field := range obj {
		if !slices.Contains(apps.RateCategories, field) {
			return errInvalid("unknown rate-limit category %q (want create, property, message or query)", field)
		}
		n, ok, err := obj.int64Field(field, false)
		if err != nil {
			return err
		}
		if ok { // null: unchanged, as for every optional field
			changes[field] = n
		}
	}
	limits, err := a.appSvc.SetRateLimits(c.Request.Context(), app.Key, changes)
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.RateLimits(limits))
}

func summarize(d store.Device) apitypes.DeviceSummary {
	return apitypes.DeviceSummary{
		Name: d.Name, Mark: d.Mark, Flag: d.Flag, Status: d.Status,
		TimeCreate: d.TimeCreate, TimeActive: d.TimeActive, Tags: tagsAnswer(d.Tags),
	}
}

// queryLimit reads a listing's limit parameter: def when absent, else
// 1 to max.
func queryLimit(c *gin.Context, def, max int) (int, error) {
	s := c.Query("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, errInvalid("limit must be 1 to %d", max)
	}
	return n, nil
}

// listDevices serves GET /admin/v1/apps/{key}/devices?prefix=&cursor=&limit=,
// or with tag= the devices carrying that tag (prefix then does not apply).
func (a *API) listDevices(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c, DefaultDeviceListLimit, MaxDeviceListLimit)
	if err != nil {
		return err
	}
	var page store.DevicePage
	if tag, ok := c.GetQuery("tag"); ok {
		if err := devices.ValidateTag("tag", tag); err != nil {
			return err
		}
		page, err = a.store.ListTagged(c.Request.Context(), app.Key, tag, c.Query("cursor"), limit)
	} else {
		page, err = a.store.ListDevices(c.Request.Context(), app.Key, c.Query("prefix"), c.Query("cursor"), limit)
	}
	if err != nil {
		return fmt.Errorf("list devices: %w", err)
	}
	out := make([]apitypes.DeviceSummary, len(page.Devices))
	for i, d := range page.Devices {
		out[i] = summarize(d)
	}
	return writeJSON(c, apitypes.DevicePage{Devices: out, NextCursor: page.Next})
}

// listMessages serves GET /admin/v1/apps/{key}/messages?cursor=&limit=:
// the app's messages newest first, each as GET /msg/v1/msg shows it. The
// cursor is the msgid to continue below.
func (a *API) listMessages(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c, DefaultMessageListLimit, MaxMessageListLimit)
	if err != nil {
		return err
	}
	var before int64
	if s := c.Query("cursor"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			return errInvalid("cursor must be a msgid from next_cursor")
		}
	}
	ms, err := a.store.ListMessages(c.Request.Context(), app.Key, before, limit+1)
	if err != nil {
		return fmt.Errorf("list messages: %w", err)
	}
	next := ""
	if len(ms) > limit {
		ms = ms[:limit]
		next = strconv.FormatInt(ms[limit-1].ID, 10)
	}
	out := make([]apitypes.Message, len(ms))
	for i, m := range ms {
		out[i] = viewMessage(m)
	}
	return writeJSON(c, apitypes.MessagePage{Messages: out, NextCursor: next})
}

// patchDevice serves PATCH /admin/v1/apps/{key}/devices/{name}: flag,
// mark and tags (the whole set).
func (a *API) patchDevice(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	name := c.Param("name")
	var ch devices.Change
	if n, ok, err := obj.int64Field("flag", false); err != nil {
		return err
	} else if ok {
		if err := devices.ValidateFlag(n); err != nil {
			return err
		}
		ch.Flag = new(int(n))
	}
	if mark, ok, err := obj.stringField("mark", false); err != nil {
		return err
	} else if ok {
		if err := devices.ValidateMark(mark); err != nil {
			return err
		}
		ch.Mark = &mark
	}
	if tags, ok, err := obj.tagsField("tags"); err != nil {
		return err
	} else if ok {
		ch.Tags = &tags
	}
	d, err := a.devices.Update(c.Request.Context(), app.Key, name, ch)
	if err != nil {
		return err
	}
	return writeJSON(c, summarize(d))
}

// getDevice serves GET /admin/v1/apps/{key}/devices/{name}: base info,
// presence and properties in one answer, for the console's device page.
func (a *API) getDevice(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	d, err := a.loadDevice(c, app.Key, c.Param("name"))
	if err != nil {
		return err
	}
	props, err := a.shadows.Summary(c.Request.Context(), app.Key, d.Name)
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.AdminDevice{
		Device: apitypes.DeviceDetail{
			Name: d.Name, Mark: d.Mark, Flag: d.Flag, Status: d.Status, ClientIP: d.ClientIP,
			LastLoginTime: unixString(d.LastLoginTime), LastLogoutTime: unixString(d.LastLogoutTime),
			TimeCreate: d.TimeCreate, TimeActive: d.TimeActive, Tags: tagsAnswer(d.Tags),
		},
		Properties: propertySummary(props),
	})
}

// deleteDevice serves DELETE /admin/v1/apps/{key}/devices/{name}
// (docs/api.md, "Delete a device"; devices.Service.Delete orders the
// steps).
func (a *API) deleteDevice(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	name := c.Param("name")
	if err := a.devices.Delete(c.Request.Context(), app.Key, name); err != nil {
		return err
	}
	return writeJSON(c, apitypes.DeletedDevice{Deleted: true, DeviceName: name})
}
