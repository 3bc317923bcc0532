package apitypes

import "encoding/json"

// Event is one event of the app's event log (docs/events.md, "The event
// shape"), as a pull, a webhook and the console show it.
type Event struct {
	ID         string          `json:"id"` // a decimal string
	Type       string          `json:"type"`
	AppKey     string          `json:"app_key"`
	DeviceName string          `json:"device_name"`
	Time       int64           `json:"time"` // Unix ms
	Data       json.RawMessage `json:"data"`
}

// EventPage is the answer to GET /event/v1/events.
type EventPage struct {
	Events []Event `json:"events"`
	// Next is the cursor of the next pull.
	Next string `json:"next"`
	// Newest is the app's newest event id, "0" for a log never written:
	// where a reader that wants only what comes from now on starts, in
	// one pull.
	Newest string `json:"newest"`
}

// EventWebhook is one of an app's event webhooks.
type EventWebhook struct {
	URL       string   `json:"url"`
	Types     []string `json:"types"`
	Format    string   `json:"format"`     // "" (JSON arrays of events) or "jiot"
	CreatedAt int64    `json:"created_at"` // Unix ms
}

// EventWebhooks is the answer of every /admin/v1/apps/{key}/events/webhooks
// call (fields in key order): the webhooks and the signing secret their
// receivers verify with.
type EventWebhooks struct {
	SigningSecret string         `json:"signing_secret"`
	Webhooks      []EventWebhook `json:"webhooks"`
}

// EventWebhookRequest is the body of POST
// /admin/v1/apps/{key}/events/webhooks; types nil takes every type.
type EventWebhookRequest struct {
	URL    string   `json:"url"`
	Types  []string `json:"types,omitempty"`
	Format string   `json:"format,omitempty"`
}
