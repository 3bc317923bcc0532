package restapi

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/store"
)

// Config holds the REST API's settings; cmd/devmsg fills it from the
// service configuration.
type Config struct {
	// NodeID goes into generated msgids and op_ids (0..1023).
	NodeID int
	// DefaultRateLimit is the requests per second allowed per app and
	// category when the app sets none; 0 means unlimited.
	DefaultRateLimit int
	// AdminUsername and AdminPasswordSHA256 authenticate the admin account
	// on /admin/v1.
	AdminUsername       string
	AdminPasswordSHA256 [32]byte
}

// API serves the spec's REST API, the admin API, /healthz, /readyz and
// /metrics.
type API struct {
	cfg     Config
	store   store.Store
	log     *slog.Logger
	handler http.Handler
}

// New builds the API. Metrics are registered with reg.
func New(cfg Config, st store.Store, log *slog.Logger, reg *prometheus.Registry) (*API, error) {
	a := &API{cfg: cfg, store: st, log: log}
	a.handler = http.NotFoundHandler() // replaced by the router
	return a, nil
}

// Handler returns the HTTP handler serving every route.
func (a *API) Handler() http.Handler { return a.handler }
