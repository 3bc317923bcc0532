package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

// eventWebhookRoutes serves an app's event webhooks (docs/api.md, "Event
// webhooks"), when the API has them.
func (a *API) eventWebhookRoutes(g *gin.RouterGroup) {
	if a.cfg.EventWebhooks == nil {
		return
	}
	g.GET("/apps/:key/events/webhooks", a.wrap(a.listEventWebhooks))
	g.POST("/apps/:key/events/webhooks", a.wrap(a.addEventWebhook))
	g.DELETE("/apps/:key/events/webhooks", a.wrap(a.deleteEventWebhook))
}

// eventWebhooksView lists the app's webhooks with the signing secret
// their receivers verify with (the callbacks' one).
func eventWebhooksView(app store.App) apitypes.EventWebhooks {
	out := make([]apitypes.EventWebhook, len(app.EventWebhooks))
	for i, h := range app.EventWebhooks {
		types := h.Types
		if types == nil {
			types = events.Types
		}
		out[i] = apitypes.EventWebhook{URL: h.URL, Types: types, Format: h.Format, CreatedAt: h.CreatedAt}
	}
	return apitypes.EventWebhooks{SigningSecret: webhook.SigningSecret(app), Webhooks: out}
}

// listEventWebhooks serves GET /admin/v1/apps/{key}/events/webhooks.
func (a *API) listEventWebhooks(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	return writeJSON(c, eventWebhooksView(app))
}

// addEventWebhook serves POST /admin/v1/apps/{key}/events/webhooks
// {"url","types","format"}: checks the webhook, verifies its URL with the
// echostr GET of the callbacks, then adds it; it gets the events made
// from then on.
func (a *API) addEventWebhook(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	u, err := urlField(obj)
	if err != nil {
		return err
	}
	// One spelling per receiver (HTTP://Host:80/x? is http://host/x), so
	// that the duplicate check sees through spellings.
	u = events.NormalWebhookURL(u)
	var h store.EventWebhook
	h.URL = u
	if obj.has("types") {
		if h.Types, err = webhookTypes(obj["types"]); err != nil {
			return err
		}
	}
	if h.Format, _, err = obj.stringField("format", false); err != nil {
		return err
	}
	if h, err = events.CheckWebhook(h); err != nil {
		return err
	}
	if err := webhook.CheckURL(u, a.cfg.CallbackAllowCustomPorts); err != nil {
		// The callback URL rules, worded for this URL.
		return errInvalid("event webhook %s", strings.TrimPrefix(err.Error(), "callback "))
	}
	// Checked before the verification, which can take seconds, and again
	// in the update, which a concurrent change may have made stale.
	if err := events.CheckAddable(app, u); err != nil {
		return err
	}
	err = webhook.Verify(c.Request.Context(), a.verifier, u, app)
	if errors.Is(err, netguard.ErrNotAllowed) {
		return errGuarded("event webhook URL", u)
	}
	if err != nil {
		return errInvalid("event webhook URL %q: %v", u, err)
	}
	if app, err = a.cfg.EventWebhooks.Add(c.Request.Context(), app.Key, h); err != nil {
		return err
	}
	return writeJSON(c, eventWebhooksView(app))
}

// webhookTypes reads a webhook's "types": an array whose every element is
// an event type; any other element, a string or not, gets the one message
// that names it (CheckWebhook checks the strings).
func webhookTypes(raw json.RawMessage) ([]string, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || elems == nil {
		return nil, errInvalid("types must be an array of event types (%s)", strings.Join(events.Types, ", "))
	}
	types := make([]string, len(elems))
	for i, el := range elems {
		if json.Unmarshal(el, &types[i]) != nil || string(el) == "null" {
			return nil, errdefs.Invalid(fmt.Sprintf("types[%d]", i), "%s is not an event type (one of %v)", el, events.Types)
		}
	}
	return types, nil
}

// deleteEventWebhook serves DELETE .../events/webhooks?url=...
func (a *API) deleteEventWebhook(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	u := c.Query("url")
	if u == "" {
		return errMissing("url")
	}
	if app, err = a.cfg.EventWebhooks.Delete(c.Request.Context(), app.Key, u); err != nil {
		return err
	}
	return writeJSON(c, eventWebhooksView(app))
}
