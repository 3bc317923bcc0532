package events

import (
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

// Webhook formats (docs/events.md, "Webhooks").
const (
	// FormatEvents posts a JSON array of events in their one shape.
	FormatEvents = ""
	// FormatJIOT posts each device.event alone, in the source API's
	// event-callback body.
	FormatJIOT = "jiot"
)

// webhookIDLen is the length of a webhook's generated id.
const webhookIDLen = 16

// CheckWebhook checks what an admin gives for a new webhook, its types
// and format (the URL follows the callback URL rules, checked by the
// caller), and returns it as it is stored: Types nil for every type, and
// exactly device.event for a jiot webhook. The errors are
// *errdefs.InvalidError naming the field.
func CheckWebhook(h store.EventWebhook) (store.EventWebhook, error) {
	if h.Types != nil {
		if len(h.Types) == 0 {
			return h, errdefs.Invalid("types", "must name at least one event type; leave it out for every type")
		}
		for i, t := range h.Types {
			if !KnownType(t) {
				return h, errdefs.Invalid(fmt.Sprintf("types[%d]", i), "%q is not an event type (one of %v)", t, Types)
			}
			if slices.Index(h.Types, t) != i {
				return h, errdefs.Invalid(fmt.Sprintf("types[%d]", i), "%q appears twice", t)
			}
		}
	}
	switch h.Format {
	case FormatEvents:
	case FormatJIOT:
		// The source API's event callback carries event reports only.
		if h.Types != nil && !slices.Equal(h.Types, []string{TypeEvent}) {
			return h, errdefs.Invalid("types", "of a jiot webhook can only be [%q]: the jiot format carries device event reports only", TypeEvent)
		}
		h.Types = []string{TypeEvent}
	default:
		return h, errdefs.Invalid("format", "must be %q or left out, got %q", FormatJIOT, h.Format)
	}
	return h, nil
}

// CheckAddable refuses a webhook URL the app has already, in any spelling
// NormalWebhookURL makes the same (a *errdefs.ConflictError), or that
// would be one too many (a *errdefs.InvalidError).
func CheckAddable(app store.App, url string) error {
	if slices.ContainsFunc(app.EventWebhooks, func(h store.EventWebhook) bool { return sameWebhookURL(h.URL, url) }) {
		return errdefs.Conflict("event webhook", url, "is already configured")
	}
	if len(app.EventWebhooks) >= store.MaxEventWebhooks {
		return &errdefs.InvalidError{Field: "url", Message: fmt.Sprintf(
			"at most %d event webhooks can be configured per app; delete one first", store.MaxEventWebhooks)}
	}
	return nil
}

// Add adds h, checked with CheckWebhook and its URL verified by the
// caller, to the app's webhooks and returns the app. The webhook starts
// at the log's current end: it gets the events appended from now on, not
// the ones already kept (pull reads those). CheckAddable is applied
// again under the app's lock, as a concurrent change may have made the
// caller's check stale.
func (w *Webhooks) Add(ctx context.Context, appKey string, h store.EventWebhook) (store.App, error) {
	start, err := w.newest(ctx, appKey)
	if err != nil {
		return store.App{}, err
	}
	h.ID = secret.Alnum(webhookIDLen)
	h.Start = start
	h.CreatedAt = w.now().UnixMilli()
	app, err := w.apps.Update(ctx, appKey, func(app *store.App) error {
		if err := CheckAddable(*app, h.URL); err != nil {
			return err
		}
		app.EventWebhooks = append(app.EventWebhooks, h)
		return nil
	})
	if err != nil {
		return store.App{}, fmt.Errorf("update app: %w", err)
	}
	w.Changed(appKey)
	return app, nil
}

// Delete removes the app's webhook with url (in any spelling
// NormalWebhookURL makes the same) and returns the app; its delivery
// stops at once (a POST in flight is abandoned).
func (w *Webhooks) Delete(ctx context.Context, appKey, url string) (store.App, error) {
	app, err := w.apps.Update(ctx, appKey, func(app *store.App) error {
		i := slices.IndexFunc(app.EventWebhooks, func(h store.EventWebhook) bool { return sameWebhookURL(h.URL, url) })
		if i < 0 {
			return &errdefs.InvalidError{Field: "url", Message: fmt.Sprintf("event webhook %q is not configured", url)}
		}
		app.EventWebhooks = slices.Delete(app.EventWebhooks, i, i+1)
		return nil
	})
	if err != nil {
		return store.App{}, fmt.Errorf("update app: %w", err)
	}
	w.Changed(appKey)
	return app, nil
}

// newest returns the ID of the app's newest event, 0 when its log was
// never written: one read, whose page carries it (store.EventPage.Newest).
func (w *Webhooks) newest(ctx context.Context, appKey string) (int64, error) {
	p, err := w.st.ReadEvents(ctx, store.EventQuery{AppKey: appKey, Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("find the end of the event log: %w", err)
	}
	return p.Newest, nil
}
