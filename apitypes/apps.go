package apitypes

import "encoding/json"

// CreateAppRequest is the body of POST /admin/v1/apps.
type CreateAppRequest struct {
	Name string `json:"name"`
}

// CreatedApp is the answer to POST /admin/v1/apps (fields in key order).
type CreatedApp struct {
	Key          string `json:"key"`
	MasterSecret string `json:"master_secret"`
	Name         string `json:"name"`
}

// AppSummary is one app of GET /admin/v1/apps.
type AppSummary struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	CreatedAt int64  `json:"created_at"` // Unix seconds
	Devices   int64  `json:"devices"`    // how many devices the app has
}

// AppList is the answer to GET /admin/v1/apps.
type AppList struct {
	Apps []AppSummary `json:"apps"`
}

// App is the answer to GET /admin/v1/apps/{key}: the app with its master
// secret and the rate limits in effect.
type App struct {
	Name         string         `json:"name"`
	Key          string         `json:"key"`
	MasterSecret string         `json:"master_secret"`
	CreatedAt    int64          `json:"created_at"` // Unix seconds
	Devices      int64          `json:"devices"`    // how many devices the app has
	RateLimits   map[string]int `json:"rate_limits"`
}

// RotateSecretRequest is the body of POST
// /admin/v1/apps/{key}/master_secret: confirm repeats the app key.
type RotateSecretRequest struct {
	Confirm string `json:"confirm"`
}

// MasterSecret is the answer to POST /admin/v1/apps/{key}/master_secret
// (fields in key order).
type MasterSecret struct {
	Key          string `json:"key"`
	MasterSecret string `json:"master_secret"`
}

// RateLimits is the answer to GET and PUT /admin/v1/apps/{key}/ratelimits:
// requests per second per category (create, property, message, query), 0
// meaning unlimited.
type RateLimits map[string]int

// RateLimitChanges is the body of PUT /admin/v1/apps/{key}/ratelimits:
// the categories to change; the others stay.
type RateLimitChanges map[string]int64

// PropertyDef is one entry of an app's property model. The bounds are
// JSON numbers kept as written, so that a client sends what its user
// typed and shows what the API answered; omitted ("") when unset.
type PropertyDef struct {
	Name      string      `json:"name"`
	Type      string      `json:"type"` // int, double or string
	Min       json.Number `json:"min,omitempty"`
	Max       json.Number `json:"max,omitempty"`
	MaxLength json.Number `json:"max_length,omitempty"`
}

// PropertyModel is the body and the answer of PUT, and the answer of GET,
// /admin/v1/apps/{key}/properties: the whole model.
type PropertyModel struct {
	Properties []PropertyDef `json:"properties"`
}
