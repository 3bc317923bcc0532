// Package restapi serves the HTTPS REST API of docs/api.md (/device/v1, /msg/v1),
// the admin API (/admin/v1), health endpoints and Prometheus metrics.
// Handlers parse a request, call one method of a domain service
// (shadow.Service, message.Service, devices.Service, apps.Service,
// callback.DeadLetters, which cmd/devmsg builds) and render the answer;
// they write nothing to the store themselves. Every error becomes the
// API's {"error":{"code","message"}} body in one place, writeError, which
// maps the domain's typed errors (package errdefs) to the codes of docs/api.md, Errors.
// Answers are built with the request and response types of package
// apitypes, which the console shares; the few written by hand for speed
// (a send's, a broadcast's, the error body) are held to those types'
// bytes by the package's tests.
//
// seq_no replay stays here (seq.go) because what it records and replays is
// an HTTP answer: the request's fingerprint, status and body. The services
// store the entry atomically with their write; restapi builds it, looks it
// up and replays it.
//
// The package is some 2,000 lines because it is three HTTP surfaces (the
// device and message API, the admin API the console also uses, health and metrics)
// with exact input rules: strict JSON bodies with typed field
// errors (body.go), seq_no replay, per-app rate limits and the throttle of
// failed authentication. Split by surface, each file is a few hundred
// lines; what is left is parsing and rendering, not domain rules.
package restapi
