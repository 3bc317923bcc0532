package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path the console is served under; cmd/devmsg mounts the
// handler with mux.Handle(Prefix, c).
const Prefix = "/console/"

// Session and sign-in limits.
const (
	// SessionIdle is how long a session lives without a request.
	SessionIdle = 12 * time.Hour
	// LockoutFailures failed sign-ins for one (client IP, user) within
	// LockoutWindow lock that pair out for LockoutWindow.
	LockoutFailures = 5
	LockoutWindow   = 15 * time.Minute
	// FailureDelay is added to every failed sign-in, so guessing is slow
	// even below the lockout.
	FailureDelay = time.Second
)

const (
	// maxFormBytes bounds a POST body: the largest is a CSV upload.
	maxFormBytes = 5 << 20
	// maxBatchLines bounds the devices created by one paste or upload;
	// the API takes 1000 per call, so this is at most ten calls.
	maxBatchLines = 10000
	// devicesPerPage is the device list's page size.
	devicesPerPage = 50
	// messagesPerPage is the recent-message list's page size.
	messagesPerPage = 50
	// deadLettersPerPage is the dead-letter list's page size.
	deadLettersPerPage = 20
	// sampleInterval is how often the overview's counters are sampled.
	sampleInterval = time.Minute
)

// Config is what the console needs from the service.
type Config struct {
	// API serves the REST and admin API. The console performs every
	// action by calling it in-process with the signed-in user's
	// credentials, so it can do nothing a script could not, and every
	// rule is checked in one place.
	API http.Handler
	// Gatherer is the registry /metrics serves; the overview reads its
	// devmsg_* series. nil: the overview shows no numbers.
	Gatherer prometheus.Gatherer
	// Logger receives internal errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock of sessions and lockouts; nil means time.Now.
	Now func() time.Time
}

// Console is the web console: an http.Handler for every path under
// Prefix, plus a background sampler of the overview's counters that Close
// stops.
type Console struct {
	api   http.Handler
	log   *slog.Logger
	now   func() time.Time
	mux   *http.ServeMux
	pages map[string]*template.Template
	// sleep waits out the delay after a failed sign-in; tests replace it.
	sleep func(r *http.Request, d time.Duration)

	metrics *sampler
	// progress keeps the broadcast counts the broadcast page read.
	progress *progressLog

	mu       sync.Mutex
	sessions map[string]*session // by cookie value
	fails    map[string]*failures

	// closing ends when Close is called: open event streams stop.
	closing      context.Context
	closeStreams context.CancelFunc
	// streams counts the event streams open now.
	streams atomic.Int64
	// streamWait is how long one pull of an event stream long-polls;
	// tests shorten it.
	streamWait time.Duration

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New builds the console and starts its counter sampler.
func New(cfg Config) (*Console, error) {
	if cfg.API == nil {
		return nil, errors.New("console: Config.API is required")
	}
	c := &Console{
		api:      cfg.API,
		log:      cfg.Logger,
		now:      cfg.Now,
		sleep:    sleepFull,
		metrics:  newSampler(cfg.Gatherer),
		progress: newProgressLog(),
		sessions: map[string]*session{},
		fails:    map[string]*failures{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.streamWait = streamWait
	c.closing, c.closeStreams = context.WithCancel(context.Background())
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.now == nil {
		c.now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c.pages = pages
	c.routes()
	c.metrics.sample(c.log)
	go c.background()
	return c, nil
}

// Close stops the background sampler and ends the open event streams
// (cmd/devmsg calls it when the HTTP server begins to shut down, so open
// streams do not hold the shutdown up). The pages keep serving.
func (c *Console) Close() error {
	c.closeOnce.Do(func() {
		c.closeStreams()
		close(c.stop)
		<-c.done
	})
	return nil
}

// background samples the counters every minute and drops expired
// sessions and lockout records.
func (c *Console) background() {
	defer close(c.done)
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.metrics.sample(c.log)
			c.prune()
		}
	}
}

func sleepFull(_ *http.Request, d time.Duration) {
	// Not cut short when the client goes away: a script that hangs up
	// early must still wait before its next guess is checked.
	time.Sleep(d)
}

// ServeHTTP serves every path under Prefix, and redirects /console to it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if r.URL.Path == "/console" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// routes registers every page and action. GET patterns render; POST
// patterns act and redirect (Post/Redirect/Get).
func (c *Console) routes() {
	m := http.NewServeMux()
	c.mux = m
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	m.Handle("GET /console/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	}))
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.Handle("POST /console/logout", c.action(c.logout))

	m.Handle("GET /console/{$}", c.page(c.overviewPage))
	m.Handle("GET /console/apps", c.page(c.appsPage))
	m.Handle("POST /console/apps", c.adminOnly(c.action(c.createApp)))
	m.Handle("GET /console/apps/{key}", c.page(c.appPage))
	m.Handle("POST /console/apps/{key}/secret/reveal", c.action(c.revealSecret))
	m.Handle("POST /console/apps/{key}/secret/rotate", c.action(c.rotateSecret))
	m.Handle("POST /console/apps/{key}/ratelimits", c.action(c.setRateLimits))
	m.Handle("POST /console/apps/{key}/properties/add", c.action(c.addProperty))
	m.Handle("POST /console/apps/{key}/properties/update", c.action(c.updateProperty))
	m.Handle("POST /console/apps/{key}/properties/remove", c.action(c.removeProperty))

	m.Handle("GET /console/apps/{key}/devices", c.page(c.devicesPage))
	m.Handle("POST /console/apps/{key}/devices", c.action(c.createDevices))
	m.Handle("GET /console/apps/{key}/devices/{name}", c.page(c.devicePage))
	m.Handle("POST /console/apps/{key}/devices/{name}/property", c.action(c.setDesired))
	m.Handle("POST /console/apps/{key}/devices/{name}/flag", c.action(c.setFlag))
	m.Handle("POST /console/apps/{key}/devices/{name}/tags", c.action(c.setTags))
	m.Handle("POST /console/apps/{key}/devices/{name}/delete", c.action(c.deleteDevice))
	m.Handle("POST /console/apps/{key}/devices/{name}/message", c.action(c.sendMessage))
	m.Handle("POST /console/apps/{key}/devices/{name}/command", c.action(c.sendCommand))

	m.Handle("GET /console/apps/{key}/messages", c.page(c.messagesPage))
	m.Handle("POST /console/apps/{key}/messages/retract", c.action(c.retract))

	m.Handle("GET /console/apps/{key}/events", c.page(c.eventsPage))
	m.HandleFunc("GET /console/apps/{key}/events/stream", c.eventStream)
	m.Handle("GET /console/apps/{key}/webhooks", c.page(c.webhooksPage))
	m.Handle("POST /console/apps/{key}/webhooks/add", c.action(c.addWebhook))
	m.Handle("POST /console/apps/{key}/webhooks/delete", c.action(c.deleteWebhook))
	m.Handle("GET /console/apps/{key}/broadcast", c.page(c.broadcastPage))
	m.Handle("POST /console/apps/{key}/broadcast", c.action(c.createBroadcast))
	m.Handle("POST /console/apps/{key}/broadcast/cancel", c.action(c.cancelBroadcast))

	m.Handle("GET /console/apps/{key}/jobs", c.page(c.jobsPage))
	m.Handle("POST /console/apps/{key}/jobs", c.action(c.createJob))
	m.Handle("GET /console/apps/{key}/jobs/{id}", c.page(c.jobPage))
	m.Handle("POST /console/apps/{key}/jobs/{id}/pause", c.action(c.jobAction("pause", "paused", "paused")))
	m.Handle("POST /console/apps/{key}/jobs/{id}/resume", c.action(c.jobAction("resume", "resumed", "running")))
	m.Handle("POST /console/apps/{key}/jobs/{id}/cancel", c.action(c.jobAction("cancel", "cancelled", "cancelled")))

	m.Handle("GET /console/apps/{key}/callbacks", c.page(c.callbacksPage))
	m.Handle("POST /console/apps/{key}/callbacks/switch", c.action(c.setSwitch))
	m.Handle("POST /console/apps/{key}/callbacks/types", c.action(c.setTypes))
	m.Handle("POST /console/apps/{key}/callbacks/urls/add", c.action(c.addURL))
	m.Handle("POST /console/apps/{key}/callbacks/urls/test", c.action(c.testURL))
	m.Handle("POST /console/apps/{key}/callbacks/urls/default", c.action(c.defaultURL))
	m.Handle("POST /console/apps/{key}/callbacks/urls/delete", c.action(c.deleteURL))
	m.Handle("POST /console/apps/{key}/callbacks/deadletters/{id}/redeliver", c.action(c.redeliver))

	m.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		s, _ := c.session(r)
		c.errorPage(w, r, s, http.StatusNotFound, "There is no such page.")
	})
}

// req is one request of a signed-in user.
type req struct {
	c   *Console
	w   http.ResponseWriter
	r   *http.Request
	s   *session // a copy; change the stored one through c's methods
	key string   // the {key} of the path, "" when none

	appCreds *creds // the app's own credentials, once loaded
}

// pageFunc renders a GET page; an error is rendered as an error page.
type pageFunc func(q *req) error

// actionFunc performs a POST and returns where to go back to. A failed API
// call comes back as a flash message on that page.
type actionFunc func(q *req) (back string, err error)

// signedIn finds the session of r and checks that it may see the app in
// the path. It answers the request itself when not.
func (c *Console) signedIn(w http.ResponseWriter, r *http.Request) (*req, bool) {
	s, hadCookie := c.session(r)
	if s == nil {
		to := "/console/login"
		if hadCookie {
			to += "?expired=1"
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
		return nil, false
	}
	q := &req{c: c, w: w, r: r, s: s, key: r.PathValue("key")}
	// An app owner sees only their own app: any other key does not exist
	// as far as they can tell.
	if q.key != "" && !s.admin && q.key != s.appKey {
		c.errorPage(w, r, s, http.StatusNotFound, "There is no such page.")
		return nil, false
	}
	return q, true
}

func (c *Console) page(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, ok := c.signedIn(w, r)
		if !ok {
			return
		}
		if err := fn(q); err != nil {
			c.fail(q, err)
		}
	})
}

func (c *Console) action(fn actionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, ok := c.signedIn(w, r)
		if !ok {
			return
		}
		if err := parseForm(w, r); err != nil {
			c.errorPage(w, r, q.s, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		if !tokenEqual(r.PostFormValue("csrf"), q.s.csrf) {
			c.errorPage(w, r, q.s, http.StatusForbidden,
				"The form was out of date or came from another site, so nothing was done (CSRF check failed). Reload the page and try again.")
			return
		}
		back, err := fn(q)
		if err != nil {
			var ae *apiError
			switch {
			case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized && !c.credsValid(q):
				c.endSession(w, r, q.s)
				http.Redirect(w, r, "/console/login?expired=1", http.StatusSeeOther)
				return
			case errors.As(err, &ae), errors.As(err, new(*userError)):
				c.setFlash(q.s.id, &flash{Kind: "error", Message: err.Error()})
			default:
				c.log.Error("console action failed", "path", r.URL.Path, "err", err)
				c.setFlash(q.s.id, &flash{Kind: "error", Message: "Internal error; nothing may have been done. Try again."})
			}
		}
		if back == "" {
			back = Prefix
		}
		http.Redirect(w, r, back, http.StatusSeeOther)
	})
}

// adminOnly hides h from app owners.
func (c *Console) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, _ := c.session(r); s != nil && !s.admin {
			c.errorPage(w, r, s, http.StatusNotFound, "There is no such page.")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// parseForm reads a urlencoded or multipart body of at most maxFormBytes.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	var err error
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		err = r.ParseMultipartForm(maxFormBytes)
	} else {
		err = r.ParseForm()
	}
	if err != nil {
		return fmt.Errorf("the form could not be read (at most %d MiB): %v", maxFormBytes>>20, err)
	}
	return nil
}

// userError is a mistake in a form, shown to the user as is.
type userError struct{ msg string }

func (e *userError) Error() string { return e.msg }

func userErrorf(format string, args ...any) error {
	return &userError{fmt.Sprintf(format, args...)}
}

// fail renders the error of a GET page.
func (c *Console) fail(q *req, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.Status == http.StatusUnauthorized && !c.credsValid(q):
			c.endSession(q.w, q.r, q.s)
			http.Redirect(q.w, q.r, "/console/login?expired=1", http.StatusSeeOther)
		case ae.notFound():
			c.errorPage(q.w, q.r, q.s, http.StatusNotFound, ae.Message)
		default:
			status := ae.Status
			if status < 400 {
				status = http.StatusBadGateway
			}
			c.errorPage(q.w, q.r, q.s, status, ae.Message)
		}
		return
	}
	c.log.Error("console page failed", "path", q.r.URL.Path, "err", err)
	c.errorPage(q.w, q.r, q.s, http.StatusInternalServerError, "Internal error; try again.")
}

// view is what every page template gets.
type view struct {
	Title   string
	Section string // the navigation entry to mark current
	Admin   bool
	Signed  bool
	Who     string
	CSRF    string
	AppKey  string // the app the page is about, for its navigation
	Flash   *flash
	Data    any
}

// render writes page with data, taking the session's flash message.
func (q *req) render(status int, page, title, section string, data any) error {
	v := view{
		Title: title, Section: section, Signed: true, Admin: q.s.admin, Who: q.s.who,
		CSRF: q.s.csrf, AppKey: q.key, Flash: q.c.takeFlash(q.s.id), Data: data,
	}
	return q.c.write(q.w, status, page, v)
}

func (c *Console) write(w http.ResponseWriter, status int, page string, v view) error {
	t, ok := c.pages[page]
	if !ok {
		return fmt.Errorf("no template %q", page)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("render %s: %w", page, err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// Pages can show secrets once; none may come back from a cache.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// errorPage renders a message with status; s may be nil.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	v := view{Title: http.StatusText(status), Data: errorData{status, msg}}
	if s != nil {
		v.Signed, v.Admin, v.Who, v.CSRF = true, s.admin, s.who, s.csrf
		if !s.admin {
			v.AppKey = s.appKey
		}
	}
	if err := c.write(w, status, "error", v); err != nil {
		c.log.Error("render error page", "path", r.URL.Path, "err", err)
	}
}

type errorData struct {
	Status  int
	Message string
}

func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		page := n[len("templates/") : len(n)-len(".html")]
		if page == "layout" {
			continue
		}
		t, err := template.New(page).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", n, err)
		}
		pages[page] = t
	}
	return pages, nil
}
