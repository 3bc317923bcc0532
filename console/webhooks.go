package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/events"
)

// webhookFormatJIOT is the format of a webhook written for the source
// API's event callback (docs/api.md, "Event webhooks").
const webhookFormatJIOT = "jiot"

// eventWebhook is one of the app's event webhooks, as the admin API lists
// it, with what the page computes from it.
type eventWebhook struct {
	apitypes.EventWebhook
}

// AllTypes reports whether the webhook gets every event type.
func (w eventWebhook) AllTypes() bool {
	for _, t := range events.Types {
		if !slices.Contains(w.Types, t) {
			return false
		}
	}
	return true
}

type webhooksData struct {
	Webhooks      []eventWebhook
	SigningSecret string
	Types         []string
}

func (c *Console) webhooksPage(q *req) error {
	var list apitypes.EventWebhooks
	if err := q.api(http.MethodGet, q.appPath("/events/webhooks"), nil, nil, &list); err != nil {
		return err
	}
	d := webhooksData{SigningSecret: list.SigningSecret, Types: events.Types}
	for _, w := range list.Webhooks {
		d.Webhooks = append(d.Webhooks, eventWebhook{w})
	}
	return q.render(http.StatusOK, "webhooks", "Event webhooks", "webhooks", d)
}

func (q *req) webhooksPath() string { return q.consolePath("/webhooks") }

func (c *Console) addWebhook(q *req) (string, error) {
	back := q.webhooksPath()
	u := formURL(q)
	// None ticked leaves types out: the API's default, every type; an
	// empty format is left out too.
	body := apitypes.EventWebhookRequest{URL: u, Format: strings.TrimSpace(q.r.PostFormValue("format"))}
	for _, t := range q.r.PostForm["types"] {
		if !slices.Contains(body.Types, t) {
			body.Types = append(body.Types, t)
		}
	}
	// The API checks the rules, then verifies the URL live with the
	// echostr GET; its message says which rule failed or what the URL
	// answered, and the page shows it as is.
	if err := q.api(http.MethodPost, q.appPath("/events/webhooks"), nil, body, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Verified and added: " + u + " answered the echostr check. New events go to it from now on."})
	return back, nil
}

func (c *Console) deleteWebhook(q *req) (string, error) {
	back := q.webhooksPath()
	u := formURL(q)
	if err := q.api(http.MethodDelete, q.appPath("/events/webhooks"), url.Values{"url": {u}}, nil, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Deleted " + u + ": it gets no more events."})
	return back, nil
}
