// Package restapi serves the spec's HTTPS REST API (/device/v1, /msg/v1),
// the admin API (/admin/v1), health endpoints and Prometheus metrics. It
// turns HTTP requests into store and domain calls and every error into the
// spec's {"error":{"code","message"}} body in one place, writeError.
package restapi
