package store

// MaxEventWebhooks is the most event webhooks an app may hold (see
// docs/events.md, "Webhooks").
const MaxEventWebhooks = 5

// EventWebhook is one of an app's event webhooks: a verified URL that
// the events of its types are POSTed to, in log order.
type EventWebhook struct {
	// ID names the webhook's delivery cursor; it is made when the
	// webhook is added, so a URL deleted and added again starts afresh.
	ID  string `json:"id"`
	URL string `json:"url"`
	// Types are the event types delivered; nil means every type.
	Types []string `json:"types,omitempty"`
	// Format is "" (a JSON array of events) or "jiot" (one device.event
	// per POST, in the source API's event-callback body).
	Format string `json:"format,omitempty"`
	// Start is the ID of the app's newest event when the webhook was
	// added: delivery begins after it, until a cursor is stored.
	Start int64 `json:"start"`
	// CreatedAt is when the webhook was added, Unix ms.
	CreatedAt int64 `json:"created_at"`
}
