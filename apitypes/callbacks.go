package apitypes

// CallbackSettings is the answer to GET and PUT
// /admin/v1/apps/{key}/callback: the switch, the record types sent and
// the signing secret receivers verify with.
type CallbackSettings struct {
	Enabled       bool   `json:"enabled"`
	Types         []int  `json:"types"`
	SigningSecret string `json:"signing_secret"`
}

// CallbackChange is the body of PUT /admin/v1/apps/{key}/callback; a
// field left nil is unchanged (Types pointing at [] sends no record).
type CallbackChange struct {
	Enabled *bool  `json:"enabled,omitempty"`
	Types   *[]int `json:"types,omitempty"`
}

// CallbackURL is one configured callback URL.
type CallbackURL struct {
	URL     string `json:"url"`
	Default bool   `json:"default"`
}

// CallbackURLs is the answer of every .../callback/urls call but test.
type CallbackURLs struct {
	URLs []CallbackURL `json:"urls"`
}

// URLRequest is the body of POST .../callback/urls, .../urls/default and
// .../urls/test.
type URLRequest struct {
	URL string `json:"url"`
}

// URLTest is the answer to POST .../callback/urls/test (fields in key
// order).
type URLTest struct {
	OK  bool   `json:"ok"`
	URL string `json:"url"`
}

// Delivery is one POST attempt of GET .../callback/deliveries.
type Delivery struct {
	Time      string  `json:"time"` // RFC 3339, UTC, milliseconds
	URL       string  `json:"url"`
	Records   int     `json:"records"`
	Attempt   int     `json:"attempt"`
	Status    int     `json:"status"` // 0: no HTTP response
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error"` // "" on success
}

// Deliveries is the answer to GET .../callback/deliveries, newest first.
type Deliveries struct {
	Deliveries []Delivery `json:"deliveries"`
}

// DeadLetter is one batch whose delivery failed every retry.
type DeadLetter struct {
	ID        string   `json:"id"`
	URL       string   `json:"url"`
	Attempts  int      `json:"attempts"`
	LastError string   `json:"last_error"`
	Time      int64    `json:"time"`    // Unix seconds it was dead-lettered
	Records   []Record `json:"records"` // as the callback delivered them
}

// DeadLetters is the answer to GET .../callback/deadletters, oldest
// first, and the cursor of the next page ("" after the last).
type DeadLetters struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Next        string       `json:"next"`
}

// Redelivered is the answer to POST
// .../callback/deadletters/{id}/redeliver.
type Redelivered struct {
	ID      string `json:"id"`
	Records int    `json:"records"`
}
