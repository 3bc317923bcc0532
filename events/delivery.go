package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

// WebhookConfig tunes webhook delivery: the events.batch_size and
// events.linger keys, and the callback.* keys the webhooks share
// (docs/configuration.md).
type WebhookConfig struct {
	// BatchSize is the most events in one POST (events.batch_size).
	BatchSize int
	// Linger is how long a batch that is not full waits for more events
	// after its first (events.linger); 0 sends at once.
	Linger time.Duration
	// RequestTimeout bounds a POST (callback.request_timeout).
	RequestTimeout time.Duration
	// AllowedNetworks are exempt from the address guard
	// (callback.allowed_networks).
	AllowedNetworks []netip.Prefix
	// MinBackoff and MaxBackoff bound the wait between attempts of a
	// failed POST, which doubles from the one to the other; 0: 1 s and
	// 5 min.
	MinBackoff, MaxBackoff time.Duration
	// Reload is how often the apps are read again for webhooks added or
	// deleted on another node; 0: 5 s. A change made through this node
	// applies at once.
	Reload time.Duration
}

// Defaults of WebhookConfig.
const (
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
	DefaultReload     = 5 * time.Second
)

// storeRetry is how long a loop waits after a store error.
const storeRetry = time.Second

// cursorSaveEvery bounds how often a loop stores its cursor while it
// runs: a synced write per POST would halve what one webhook delivers.
// A crash repeats at most this much of deliveries (at least once); a
// stopping loop stores its cursor on the way out.
const cursorSaveEvery = time.Second

// finalSaveTimeout bounds the cursor save of a stopping loop.
const finalSaveTimeout = 2 * time.Second

// WebhookStore is what webhooks need of the store.
type WebhookStore interface {
	ListApps(ctx context.Context) ([]store.App, error)
	ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error)
	WaitEvents(ctx context.Context, appKey string, after int64) error
	GetMeta(ctx context.Context, key string) ([]byte, error)
	PutMeta(ctx context.Context, key string, value []byte) error
}

// Apps reads and changes apps; *appcache.Cache is one, shared with the
// REST API so that a rotated secret signs the next POST.
type Apps interface {
	Get(ctx context.Context, key string) (store.App, error)
	Update(ctx context.Context, key string, fn func(*store.App) error) (store.App, error)
}

// Webhooks keeps the apps' event webhooks and delivers to them. Each
// webhook has its own loop and its own durable cursor in the store: it
// reads the log after its cursor, POSTs, and moves the cursor on only
// once the URL answered 2xx. So a slow or dead URL delays only itself,
// a restart resumes where the last delivery ended (at least once: a
// crash between a delivery and storing its cursor sends that batch
// again), and a failing URL is retried for as long as its events stay
// in the log.
type Webhooks struct {
	cfg     WebhookConfig
	st      WebhookStore
	apps    Apps
	log     *slog.Logger
	client  *http.Client
	metrics *webhookMetrics
	now     func() time.Time

	mu      sync.Mutex
	running bool
	cancel  context.CancelFunc
	kick    chan struct{}
	loops   map[loopKey]context.CancelFunc
	wg      sync.WaitGroup
}

// loopKey names one webhook's loop.
type loopKey struct{ app, id string }

// NewWebhooks returns the webhooks of the apps in st; Start runs their
// delivery. Its metrics are registered with reg.
func NewWebhooks(cfg WebhookConfig, st WebhookStore, apps Apps, log *slog.Logger, reg prometheus.Registerer) (*Webhooks, error) {
	if cfg.BatchSize < 1 || cfg.Linger < 0 || cfg.RequestTimeout <= 0 {
		return nil, fmt.Errorf("events: invalid webhook config %+v", cfg)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Reload <= 0 {
		cfg.Reload = DefaultReload
	}
	m, err := newWebhookMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Webhooks{
		cfg:     cfg,
		st:      st,
		apps:    apps,
		log:     log,
		client:  webhook.NewClient(cfg.AllowedNetworks, cfg.RequestTimeout, 4),
		metrics: m,
		now:     time.Now,
		kick:    make(chan struct{}, 1),
	}, nil
}

// Start runs the delivery of every app's webhooks until Stop. A stopped
// Webhooks may start again (in cluster mode it runs while its node holds
// the webhook lease).
func (w *Webhooks) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.running, w.cancel = true, cancel
	w.loops = map[loopKey]context.CancelFunc{}
	w.wg.Add(1)
	go w.supervise(ctx)
}

// Stop ends delivery; a POST in flight is abandoned and sent again by
// the next start, from the stored cursor.
func (w *Webhooks) Stop() {
	w.mu.Lock()
	if !w.running {
		w.mu.Unlock()
		return
	}
	w.running = false
	w.cancel()
	w.mu.Unlock()
	w.wg.Wait()
	w.metrics.webhooks.Set(0)
}

// Changed is told that an app's webhooks were added or deleted, so
// delivery follows at once rather than at the next reload.
func (w *Webhooks) Changed(string) {
	select {
	case w.kick <- struct{}{}:
	default: // a reload is pending already
	}
}

// supervise runs a loop for every configured webhook and ends the loops
// of deleted ones, reading the apps at start, on Changed and every
// Reload.
func (w *Webhooks) supervise(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.cfg.Reload)
	defer t.Stop()
	for {
		w.reload(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.C:
		}
	}
}

func (w *Webhooks) reload(ctx context.Context) {
	apps, err := w.st.ListApps(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("event webhooks: list apps", "err", err)
		}
		return // the loops run on as they are
	}
	want := map[loopKey]bool{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, app := range apps {
		for _, h := range app.EventWebhooks {
			k := loopKey{app.Key, h.ID}
			want[k] = true
			if _, ok := w.loops[k]; ok {
				continue
			}
			w.metrics.app(app.Key)
			lctx, cancel := context.WithCancel(ctx)
			w.loops[k] = cancel
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				(&loop{w: w, app: app.Key, hook: h}).run(lctx)
			}()
		}
	}
	for k, cancel := range w.loops {
		if !want[k] {
			cancel()
			delete(w.loops, k)
		}
	}
	w.metrics.webhooks.Set(float64(len(w.loops)))
}

// cursorKey is the meta key of a webhook's cursor: the ID of the last
// event it is done with. A deleted webhook's key stays behind, a few
// bytes never read again (a webhook added again gets a new ID).
func cursorKey(appKey, id string) string {
	return "event_webhook_cursor:" + appKey + ":" + id
}

// loop delivers one webhook's events.
type loop struct {
	w     *Webhooks
	app   string
	hook  store.EventWebhook
	saved int64     // the cursor as stored
	at    time.Time // when it was stored
}

func (l *loop) run(ctx context.Context) {
	cursor, ok := l.loadCursor(ctx)
	if !ok {
		return
	}
	var fl *inflight
	defer func() {
		if fl != nil {
			// ctx is done: the POST returns without retrying.
			<-fl.done.Done()
			if fl.res.sent {
				cursor = fl.next
			}
		}
		// Stopping (the node shuts down or hands the lease on) stores
		// where delivery got to, so the next loop repeats nothing.
		sctx, cancel := context.WithTimeout(context.Background(), finalSaveTimeout)
		defer cancel()
		l.save(sctx, cursor, true)
	}()
	if l.hook.Format == FormatJIOT {
		l.runJIOT(ctx, &cursor)
		return
	}
	w := l.w
	// One POST is in flight at a time (fl), so the receiver gets the
	// batches in order; while it is, the next batch is read and lingers,
	// and goes once the POST is answered. The cursor moves on only when
	// a POST is answered 2xx, to the last event examined before it.
	var (
		batch []store.Event
		next  = cursor  // where the next read starts
		due   time.Time // when a batch that is not full goes anyway
	)
	for ctx.Err() == nil {
		if fl != nil && fl.finished() {
			if fl.res.trimmed {
				// The events left the log while they were retried.
				l.overtaken(cursor, fl.res.oldest)
				cursor = max(fl.res.oldest-1, 0)
				next, batch, due = cursor, nil, time.Time{}
				l.save(ctx, cursor, true)
			} else if fl.res.sent {
				cursor = fl.next
				l.save(ctx, cursor, false)
			}
			fl = nil
			continue
		}
		if len(batch) < w.cfg.BatchSize && dataBytes(batch) < lingerBytes {
			p, err := w.st.ReadEvents(ctx, store.EventQuery{AppKey: l.app, After: next, Limit: min(w.cfg.BatchSize-len(batch), MaxPullLimit), Types: l.hook.Types})
			if errors.Is(err, store.ErrEventsTrimmed) {
				if fl != nil {
					// Settle the POST first; then read again from the
					// cursor it leaves.
					<-fl.done.Done()
					continue
				}
				l.overtaken(cursor, p.Oldest)
				cursor = max(p.Oldest-1, 0)
				next, batch, due = cursor, nil, time.Time{}
				l.save(ctx, cursor, true)
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					w.log.Error("event webhooks: read the event log", "app", l.app, "url", l.hook.URL, "err", err)
					sleep(ctx, storeRetry)
				}
				continue
			}
			batch = append(batch, p.Events...)
			next = max(next, p.Next)
		}
		if len(batch) == 0 {
			if fl == nil {
				// Nothing for this webhook: the cursor passes what it
				// examined, and the loop waits for the log to grow.
				cursor = next
				l.save(ctx, cursor, false)
			}
			l.wait(ctx, next, time.Time{}, fl)
			continue
		}
		if len(batch) < w.cfg.BatchSize && w.cfg.Linger > 0 && dataBytes(batch) < lingerBytes {
			// The batch waits Linger after its first event was made (a
			// backlog goes at once), or after now if the clocks disagree.
			if due.IsZero() {
				due = time.UnixMilli(min(batch[0].Time, w.now().UnixMilli())).Add(w.cfg.Linger)
			}
			if due.After(w.now()) {
				l.wait(ctx, next, due, fl)
				continue
			}
		}
		if fl != nil {
			<-fl.done.Done() // the batch is ready: it goes once the POST before it is answered
			continue
		}
		fl = l.start(ctx, batch, next)
		batch, due = nil, time.Time{}
	}
}

// inflight is a POST under way.
type inflight struct {
	next int64           // the cursor once it is sent
	done context.Context // done once res is set
	res  result
}

func (f *inflight) finished() bool { return f.done.Err() != nil }

// start POSTs batch on a goroutine of its own; next is the cursor once it
// is sent.
func (l *loop) start(ctx context.Context, batch []store.Event, next int64) *inflight {
	done, finish := context.WithCancel(context.Background())
	f := &inflight{next: next, done: done}
	go func() {
		defer finish()
		f.res = l.deliver(ctx, batch)
	}()
	return f
}

// wait returns once the log has events after next, or at until (unless
// zero), or when the POST fl (unless nil) is answered, or ctx ends.
func (l *loop) wait(ctx context.Context, next int64, until time.Time, fl *inflight) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !until.IsZero() {
		wctx, cancel = context.WithDeadline(wctx, until)
		defer cancel()
	}
	if fl != nil {
		stop := context.AfterFunc(fl.done, cancel)
		defer stop()
	}
	if err := l.w.st.WaitEvents(wctx, l.app, next); err != nil && wctx.Err() == nil {
		l.w.log.Error("event webhooks: wait for events", "app", l.app, "err", err)
		sleep(ctx, storeRetry)
	}
}

// runJIOT delivers a jiot webhook's events, each in a POST of its own,
// one at a time; *cursor is where delivery got to.
func (l *loop) runJIOT(ctx context.Context, cursor *int64) {
	w := l.w
	next := *cursor // where the next read starts
	for ctx.Err() == nil {
		// A read of at least 100 moves fast past the other types; each
		// device.event read goes in a POST of its own.
		limit := max(w.cfg.BatchSize, 100)
		p, err := w.st.ReadEvents(ctx, store.EventQuery{AppKey: l.app, After: next, Limit: min(limit, MaxPullLimit), Types: l.hook.Types})
		if errors.Is(err, store.ErrEventsTrimmed) {
			l.overtaken(*cursor, p.Oldest)
			*cursor = max(p.Oldest-1, 0)
			next = *cursor
			l.save(ctx, *cursor, true)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("event webhooks: read the event log", "app", l.app, "url", l.hook.URL, "err", err)
				sleep(ctx, storeRetry)
			}
			continue
		}
		next = max(next, p.Next)
		if len(p.Events) == 0 {
			*cursor = next
			l.save(ctx, *cursor, false)
			l.wait(ctx, next, time.Time{}, nil)
			continue
		}
		var res result
		res, *cursor = l.deliverJIOT(ctx, p.Events, *cursor)
		switch {
		case res.sent:
			*cursor = next
			l.save(ctx, *cursor, false)
		case res.trimmed:
			l.overtaken(*cursor, res.oldest)
			*cursor = max(res.oldest-1, 0)
			l.save(ctx, *cursor, true)
		}
		next = *cursor
	}
}

// loadCursor returns the stored cursor, or the webhook's start for a new
// one; false once ctx is done.
func (l *loop) loadCursor(ctx context.Context) (int64, bool) {
	for {
		b, err := l.w.st.GetMeta(ctx, cursorKey(l.app, l.hook.ID))
		if errors.Is(err, store.ErrNotFound) {
			l.saved = -1 // not stored
			return l.hook.Start, true
		}
		if err == nil {
			n, perr := strconv.ParseInt(string(b), 10, 64)
			if perr == nil && n >= 0 {
				l.saved = n // at stays zero: the first move after a restart is stored at once
				return n, true
			}
			err = fmt.Errorf("stored cursor %q is not an event id", b)
		}
		if ctx.Err() != nil {
			return 0, false
		}
		// Starting from anywhere else could lose or repeat a whole log:
		// wait for the store.
		l.w.log.Error("event webhooks: load cursor", "app", l.app, "url", l.hook.URL, "err", err)
		if !sleep(ctx, storeRetry) {
			return 0, false
		}
	}
}

// save stores the cursor: at once when now (the log overtook it, or the
// loop stops), otherwise at most every cursorSaveEvery. A failure is logged; the cursor in memory
// goes on, and a restart before the next save repeats deliveries.
func (l *loop) save(ctx context.Context, cursor int64, now bool) {
	if cursor == l.saved || !now && l.w.now().Sub(l.at) < cursorSaveEvery {
		return
	}
	if err := l.w.st.PutMeta(ctx, cursorKey(l.app, l.hook.ID), []byte(strconv.FormatInt(cursor, 10))); err != nil {
		if ctx.Err() == nil {
			l.w.log.Error("event webhooks: store cursor", "app", l.app, "url", l.hook.URL, "err", err)
		}
		return
	}
	l.saved, l.at = cursor, l.w.now()
}

// overtaken logs and counts that the log's trimming passed the cursor:
// the events in between were never delivered to this webhook.
func (l *loop) overtaken(cursor, oldest int64) {
	l.w.metrics.overtaken.WithLabelValues(l.app).Inc()
	l.w.log.Warn("event webhooks: events left the log before this webhook got them; skipping ahead to the oldest kept",
		"app", l.app, "url", l.hook.URL, "cursor", cursor, "oldest", oldest)
}

// result is the outcome of a delivery: sent, or not because the first
// event left the log (oldest is the oldest kept then), or because ctx
// ended.
type result struct {
	sent, trimmed bool
	oldest        int64
}

// deliver POSTs a batch as a JSON array until the URL takes it.
func (l *loop) deliver(ctx context.Context, batch []store.Event) result {
	body, err := json.Marshal(ToWires(batch))
	if err != nil {
		panic("events: wire shape does not marshal: " + err.Error())
	}
	return l.post(ctx, batch, strconv.FormatInt(batch[0].ID, 10), body)
}

// deliverJIOT POSTs each event of batch alone, in order, moving the
// cursor on after each; it returns the outcome and the cursor.
func (l *loop) deliverJIOT(ctx context.Context, batch []store.Event, cursor int64) (result, int64) {
	for i, e := range batch {
		j, ok := ToJIOT(e)
		if !ok {
			// Stored data that is not a report: nothing a jiot receiver
			// could take. Logged, never retried.
			l.w.log.Error("event webhooks: device.event data is not an event report; not sent", "app", l.app, "id", e.ID)
			continue
		}
		body, err := json.Marshal(j)
		if err != nil {
			panic("events: jiot body does not marshal: " + err.Error())
		}
		if res := l.post(ctx, batch[i:i+1], strconv.FormatInt(e.ID, 10), body); !res.sent {
			return res, cursor
		}
		cursor = e.ID
		if i < len(batch)-1 {
			l.save(ctx, cursor, false)
		}
	}
	return result{sent: true}, cursor
}

// post sends body, made of evs, until it succeeds, retrying with a
// backoff that doubles from MinBackoff to MaxBackoff for as long as
// evs[0] is in the log.
func (l *loop) post(ctx context.Context, evs []store.Event, id string, body []byte) result {
	w := l.w
	// No store Barrier here: ReadEvents shows only durable events (the
	// EventLog contract), so a receiver never hears of an event a crash
	// could take back.
	backoff := w.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		start := w.now()
		status, err := l.send(ctx, id, body)
		if err == nil {
			now := w.now()
			w.metrics.requests.WithLabelValues(l.app, "ok").Inc()
			w.metrics.delivered.WithLabelValues(l.app).Add(float64(len(evs)))
			for _, e := range evs {
				w.metrics.lag.WithLabelValues(l.app).Observe(now.Sub(time.UnixMilli(e.Time)).Seconds())
			}
			w.metrics.requestSeconds.WithLabelValues(l.app).Observe(now.Sub(start).Seconds())
			return result{sent: true}
		}
		if ctx.Err() != nil {
			return result{}
		}
		w.metrics.requests.WithLabelValues(l.app, "failed").Inc()
		w.log.Warn("event webhooks: delivery failed; will retry", "app", l.app, "url", l.hook.URL,
			"events", len(evs), "first", evs[0].ID, "attempt", attempt, "status", status, "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return result{}
		}
		backoff = min(2*backoff, w.cfg.MaxBackoff)
		// Retried while the events are in the log: once the first is
		// gone, the loop skips ahead.
		p, err := w.st.ReadEvents(ctx, store.EventQuery{AppKey: l.app, After: evs[0].ID - 1, Limit: 1})
		if errors.Is(err, store.ErrEventsTrimmed) {
			return result{trimmed: true, oldest: p.Oldest}
		}
	}
}

// send makes one POST; the error is nil only for a 2xx answer.
func (l *loop) send(ctx context.Context, id string, body []byte) (int, error) {
	w := l.w
	app, err := w.apps.Get(ctx, l.app)
	if err != nil {
		return 0, fmt.Errorf("load app: %w", err)
	}
	// The headers of callbacks (docs/events.md, "Verifying signatures"):
	// Basic with the app's key and master secret, and the Standard
	// Webhooks signature.
	req, err := webhook.NewPost(ctx, l.hook.URL, "devmsg-events", webhook.Signer{User: app.Key, Password: app.MasterSecret, Key: webhook.SigningKey(app)}, id, w.now(), body)
	if err != nil {
		return 0, err
	}
	status, err := webhook.Do(w.client, req)
	if err != nil {
		return 0, err
	}
	if status < 200 || status > 299 {
		return status, fmt.Errorf("HTTP %d", status)
	}
	return status, nil
}

// sleep waits d; false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// webhookMetrics are the webhooks' Prometheus series, labelled by app.
type webhookMetrics struct {
	delivered, overtaken *prometheus.CounterVec
	requests             *prometheus.CounterVec // app, outcome
	lag, requestSeconds  *prometheus.HistogramVec
	webhooks             prometheus.Gauge
}

// app makes the app's webhook counters exist at 0 (both outcomes) once
// it has a webhook, so a rate of failed POSTs reads 0 until the first.
func (m *webhookMetrics) app(key string) {
	m.delivered.WithLabelValues(key)
	m.overtaken.WithLabelValues(key)
	m.requests.WithLabelValues(key, "ok")
	m.requests.WithLabelValues(key, "failed")
}

func newWebhookMetrics(reg prometheus.Registerer) (*webhookMetrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &webhookMetrics{
		delivered: counter("devmsg_event_webhook_events_delivered_total", "Events delivered to event webhooks (the URL answered 2xx); a jiot webhook counts its device.events.", "app"),
		overtaken: counter("devmsg_event_webhook_overtaken_total", "Times a webhook's cursor fell behind the event log's oldest kept event: the events in between left the log undelivered to it.", "app"),
		requests:  counter("devmsg_event_webhook_requests_total", "Event webhook POSTs by outcome (ok: 2xx; failed: anything else, retried).", "app", "outcome"),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devmsg_event_webhook_delivery_lag_seconds",
			Help:    "Time from an event being made to its delivery to a webhook, batching and retries included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}, []string{"app"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devmsg_event_webhook_request_seconds",
			Help:    "Duration of successful event webhook POSTs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"app"}),
		webhooks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "devmsg_event_webhooks_delivering",
			Help: "Event webhooks this node delivers to (in a cluster, 0 on the nodes without the webhook lease).",
		}),
	}
	for _, c := range []prometheus.Collector{m.delivered, m.overtaken, m.requests, m.lag, m.requestSeconds, m.webhooks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// lingerBytes is how much event data a batch holds before it goes without
// lingering, and without reading more into it: each read is capped at store.MaxEventPageBytes, so
// a POST carries at most this plus one read's worth, not batch_size
// events of 64 KiB (64 MB at batch_size 1000).
const lingerBytes = store.MaxEventPageBytes / 2

// dataBytes is the size of the events' data.
func dataBytes(evs []store.Event) int {
	n := 0
	for _, e := range evs {
		n += len(e.Data)
	}
	return n
}
