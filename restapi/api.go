package restapi

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Config holds the REST API's settings; cmd/devmsg fills it from the
// service configuration.
type Config struct {
	// NodeID goes into generated msgids and op_ids (0..idgen.MaxNode).
	NodeID int
	// DefaultRateLimit is the requests per second allowed per app and
	// category when the app sets none; 0 means unlimited.
	DefaultRateLimit int
	// AdminUsername and AdminPasswordSHA256 authenticate the admin account
	// on /admin/v1.
	AdminUsername       string
	AdminPasswordSHA256 [32]byte
	// AuthSourceFailures, AuthIdentityFailures and AuthWindow tune the
	// throttle of failed authentication; 0 takes the package's constants
	// of the same names.
	AuthSourceFailures, AuthIdentityFailures int
	AuthWindow                               time.Duration
	// RateLimiter holds the per-app rate limits; nil keeps them in this
	// process (one node).
	RateLimiter Limiter
	// The domain services the handlers call, all required; cmd/devmsg
	// builds them (restapi/restapitest builds them on one store for
	// tests). Messages and Shadows hold the rules of messages and
	// properties, DeviceService those of devices, AppService creates apps
	// and changes their settings, DeadLetters redelivers dead letters,
	// Events reads the apps' event logs.
	Messages      *message.Service
	Shadows       *shadow.Service
	DeviceService *devices.Service
	DeadLetters   *callback.DeadLetters
	AppService    *apps.Service
	Events        *events.Service
	// Broadcasts accepts, reports and cancels broadcasts; its fan-out
	// runs apart from the API (started by cmd/devmsg).
	Broadcasts *message.Broadcaster
	// Commands sends, reports and cancels device commands.
	Commands *command.Service
	// Jobs accepts, reports, pauses, resumes and cancels jobs; its
	// runner runs apart from the API (started by cmd/devmsg).
	Jobs *job.Service
	// Apps caches apps; sharing it with the callback worker makes a
	// settings change apply there at once. nil: the API makes its own.
	Apps *appcache.Cache

	// CallbackAllowCustomPorts lets callback URLs name any port
	// (callback.allow_custom_ports); otherwise only 80 for http and 443
	// for https.
	CallbackAllowCustomPorts bool
	// CallbackAllowedNetworks are exempt from the address guard of
	// callback URLs (callback.allowed_networks); by default no
	// verification reaches loopback, private, link-local and the like.
	CallbackAllowedNetworks []netip.Prefix
	// CallbackTimeout bounds the echostr verification of a callback URL
	// (callback.request_timeout); 0 means 10 s.
	CallbackTimeout time.Duration
	// Callbacks lists an app's recent deliveries, and hears of dead
	// letters put back when New builds DeadLetters; nil: none.
	Callbacks CallbackEvents
	// EventWebhooks keeps the apps' event webhooks, which the admin API
	// adds and deletes; nil: no webhook endpoints.
	EventWebhooks *events.Webhooks

	// MaxLongPollsPerApp caps the long-polls one app has waiting at once
	// (http.max_long_polls_per_app); 0 takes DefaultMaxLongPollsPerApp,
	// negative is no cap. LongPollRoom, when set, says whether the
	// process can afford one more; nil: always.
	MaxLongPollsPerApp int
	LongPollRoom       func() bool
	// Ready, when set, is asked by /readyz after the store: an error
	// (a listener that cannot accept, a full disk) makes it answer 500.
	Ready func() error
}

// CallbackEvents is told of admin actions the callback worker must act
// on at once. Calls happen after the change is stored.
type CallbackEvents interface {
	// Redelivered follows putting a dead letter back on the delivery
	// queue of (appKey, url).
	Redelivered(appKey, url string, records int)
	// Recent returns the app's latest delivery attempts, newest first.
	Recent(appKey string) []callback.Delivery
}

// API serves the REST API of docs/api.md, the admin API, /healthz, /readyz and
// /metrics.
type API struct {
	cfg         Config
	store       store.Store
	log         *slog.Logger
	messages    *message.Service
	shadows     *shadow.Service
	appSvc      *apps.Service
	devices     *devices.Service
	deadLetters *callback.DeadLetters
	events      *events.Service
	broadcasts  *message.Broadcaster
	commands    *command.Service
	jobs        *job.Service
	limits      Limiter
	apps        *appcache.Cache
	verifier    *http.Client // for callback URL verification
	throttle    *authThrottle
	handler     http.Handler
	routes      []Route
	now         func() time.Time
	longPolls   *longPolls
}

// New builds the API. Its metrics are registered with reg, which /metrics
// serves.
func New(cfg Config, st store.Store, log *slog.Logger, reg *prometheus.Registry) (*API, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if cfg.Apps == nil {
		cfg.Apps = appcache.New(st, time.Now)
	}
	if err := cfg.checkServices(); err != nil {
		return nil, err
	}
	a := &API{
		cfg:         cfg,
		store:       st,
		log:         log,
		messages:    cfg.Messages,
		shadows:     cfg.Shadows,
		appSvc:      cfg.AppService,
		devices:     cfg.DeviceService,
		deadLetters: cfg.DeadLetters,
		events:      cfg.Events,
		broadcasts:  cfg.Broadcasts,
		commands:    cfg.Commands,
		jobs:        cfg.Jobs,
		limits:      cfg.RateLimiter,
		apps:        cfg.Apps,
		now:         time.Now,
	}
	if a.limits == nil {
		a.limits = newLocalLimiter()
	}
	if a.longPolls, err = newLongPolls(cfg.MaxLongPollsPerApp, cfg.LongPollRoom, reg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	a.throttle = newAuthThrottle(cmp.Or(cfg.AuthSourceFailures, AuthSourceFailures),
		cmp.Or(cfg.AuthIdentityFailures, AuthIdentityFailures), cmp.Or(cfg.AuthWindow, AuthWindow), a.now)
	a.verifier = newVerifyClient(cfg.CallbackTimeout, cfg.CallbackAllowedNetworks)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A JSON API answers a wrong path with its error body, not an HTML redirect.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.Use(m.middleware, a.recover)
	r.NoRoute(a.wrap(func(c *gin.Context) error {
		return &apiError{http.StatusNotFound, CodeInvalidParam, "no such endpoint: " + c.Request.Method + " " + c.Request.URL.Path, 0}
	}))
	r.NoMethod(a.wrap(func(c *gin.Context) error {
		return &apiError{http.StatusMethodNotAllowed, CodeInvalidParam, "method " + c.Request.Method + " not allowed on " + c.Request.URL.Path, 0}
	}))

	r.GET("/healthz", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", []byte(`{"status":"ok"}`)) })
	r.GET("/readyz", a.wrap(a.readyz))
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))

	dev := r.Group("/device/v1", a.authApp)
	dev.POST("/devices", a.limit(store.CategoryCreate), a.wrap(a.createDevices))
	dev.POST("/property", a.limit(store.CategoryProperty), a.wrap(a.setProperty))
	dev.GET("/property", a.limit(store.CategoryQuery), a.wrap(a.getProperty))
	dev.GET("/baseinfo", a.limit(store.CategoryQuery), a.wrap(a.baseInfo))
	dev.GET("/status", a.limit(store.CategoryQuery), a.wrap(a.status))
	dev.POST("/tags", a.limit(store.CategoryCreate), a.wrap(a.setTags))

	// The event log is read with the app's credentials, like devices.
	ev := r.Group("/event/v1", a.authApp)
	ev.GET("/events", a.limit(store.CategoryQuery), a.wrap(a.pullEvents))

	msg := r.Group("/msg/v1", a.authApp)
	msg.POST("/msg", a.limit(store.CategoryMessage), a.wrap(a.sendMessage))
	msg.GET("/msg", a.limit(store.CategoryQuery), a.wrap(a.getMessage))
	msg.DELETE("/msg", a.limit(store.CategoryMessage), a.wrap(a.retractMessage))
	msg.POST("/msgs", a.wrap(a.sendBatch)) // one message token per message (batch.go)
	msg.POST("/broadcast", a.limit(store.CategoryMessage), a.wrap(a.createBroadcast))
	msg.GET("/broadcast", a.limit(store.CategoryQuery), a.wrap(a.getBroadcast))
	msg.DELETE("/broadcast", a.limit(store.CategoryMessage), a.wrap(a.cancelBroadcast))

	cmd := r.Group("/cmd/v1", a.authApp)
	cmd.POST("/cmd", a.limit(store.CategoryCommand), a.wrap(a.sendCommand))
	cmd.GET("/cmd", a.limit(store.CategoryQuery), a.wrap(a.getCommand))
	cmd.DELETE("/cmd", a.limit(store.CategoryCommand), a.wrap(a.cancelCommand))
	cmd.POST("/cmds", a.wrap(a.sendCommands)) // one command token per command

	jobs := r.Group("/job/v1", a.authApp)
	jobs.POST("/jobs", a.limit(store.CategoryCommand), a.wrap(a.createJob))
	jobs.GET("/jobs", a.limit(store.CategoryQuery), a.wrap(a.listJobs))
	jobs.GET("/job", a.limit(store.CategoryQuery), a.wrap(a.getJob))
	jobs.GET("/job/executions", a.limit(store.CategoryQuery), a.wrap(a.getExecutions))
	jobs.POST("/job/pause", a.limit(store.CategoryCommand), a.wrap(a.changeJob((*job.Service).Pause)))
	jobs.POST("/job/resume", a.limit(store.CategoryCommand), a.wrap(a.changeJob((*job.Service).Resume)))
	jobs.POST("/job/cancel", a.limit(store.CategoryCommand), a.wrap(a.changeJob((*job.Service).Cancel)))

	a.adminRoutes(r.Group("/admin/v1", a.authAdmin))

	// Profiles for operators, behind the admin account.
	prof := r.Group("/debug/pprof", a.authAdmin, a.wrap(func(c *gin.Context) error { return requireAdmin(c) }))
	prof.GET("/", gin.WrapF(pprof.Index))
	prof.GET("/profile", gin.WrapF(pprof.Profile))
	prof.GET("/trace", gin.WrapF(pprof.Trace))
	prof.GET("/:name", gin.WrapF(pprof.Index))

	for _, ri := range r.Routes() {
		a.routes = append(a.routes, Route{Method: ri.Method, Path: ri.Path})
	}
	a.handler = headAsGet(r)
	return a, nil
}

// Route is one method and path pattern the API serves; ":name" in Path
// stands for a path parameter.
type Route struct{ Method, Path string }

// Routes lists every route the API serves, so tests can hold each one to
// a rule (documented in docs/openapi.yaml, strict about its body) without
// a list of their own that a new route could be missing from.
func (a *API) Routes() []Route { return a.routes }

// checkServices refuses a Config without one of the domain services.
func (cfg Config) checkServices() error {
	for _, s := range []struct {
		name    string
		missing bool
	}{
		{"Messages", cfg.Messages == nil}, {"Shadows", cfg.Shadows == nil}, {"DeviceService", cfg.DeviceService == nil},
		{"DeadLetters", cfg.DeadLetters == nil}, {"AppService", cfg.AppService == nil}, {"Events", cfg.Events == nil}, {"Broadcasts", cfg.Broadcasts == nil},
		{"Commands", cfg.Commands == nil}, {"Jobs", cfg.Jobs == nil},
	} {
		if s.missing {
			return fmt.Errorf("restapi: Config.%s is nil: cmd/devmsg builds every service (tests: restapi/restapitest)", s.name)
		}
	}
	return nil
}

// Handler returns the HTTP handler serving every route.
func (a *API) Handler() http.Handler { return a.handler }

// headAsGet answers HEAD like GET without the body (RFC 9110 section
// 9.3.2): every GET endpoint, with the same status, headers, checks and
// rate limit.
func headAsGet(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			get := *r
			get.Method = http.MethodGet
			r, w = &get, bodyless{w}
		}
		h.ServeHTTP(w, r)
	})
}

// bodyless drops what is written as a response body.
type bodyless struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection (a long-poll
// moves its deadlines).
func (b bodyless) Unwrap() http.ResponseWriter { return b.ResponseWriter }

func (bodyless) Write(p []byte) (int, error) { return len(p), nil }

func (a *API) readyz(c *gin.Context) error {
	if err := a.store.Ping(c.Request.Context()); err != nil {
		return fmt.Errorf("store not ready: %w", err)
	}
	if a.cfg.Ready != nil {
		if err := a.cfg.Ready(); err != nil {
			return &apiError{http.StatusInternalServerError, CodeInternal, "not ready: " + err.Error(), 0}
		}
	}
	c.Data(http.StatusOK, "application/json", []byte(`{"status":"ready"}`))
	return nil
}

// recover turns a panic in a handler into a logged 1000 instead of a
// dropped connection.
func (a *API) recover(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			a.writeError(c, fmt.Errorf("panic: %v", p))
		}
	}()
	c.Next()
}
