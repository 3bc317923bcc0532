package callback

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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

// Config tunes delivery: the callback.* keys of the service's
// configuration (docs/configuration.md, docs/callbacks.md).
type Config struct {
	BatchSize      int           // records per POST, at most
	FlushInterval  time.Duration // a record waits at most this long for its batch to fill
	RetryInterval  time.Duration // between attempts of a failed batch
	MaxRetries     int           // retries after the first attempt, then the dead-letter list
	RequestTimeout time.Duration // per POST
	// PollInterval is how often an empty outbox is read again (default
	// 10 ms); a full read is followed by the next at once.
	PollInterval time.Duration
	// AllowedNetworks are exempt from the address guard
	// (callback.allowed_networks); by default no POST reaches loopback,
	// private, link-local and the like.
	AllowedNetworks []netip.Prefix
}

// routeChunk is how many outbox entries one routing step moves.
const routeChunk = 1000

// rescanEvery is how often the router and the senders, which read from a
// cursor, read from further back again: an entry committed out of Seq
// order, or a redelivered one, may sit behind the cursor. The router
// reads from below the lowest Seq it has not seen (seqGaps), which it
// forgets after gapKeep, and from the start of the outbox every
// fullRescanEvery.
const rescanEvery = time.Second

// gapKeep is how long the router looks for a straggler in a gap.
const gapKeep = 5 * time.Second

// fullRescanEvery is how often the router reads the outbox from the
// start: for a straggler whose write took longer than gapKeep to become
// visible, and on Redis to drop idle apps from the index.
const fullRescanEvery = 10 * time.Second

// listEvery is how often the router lists the queues that hold entries.
const listEvery = 5 * time.Second

// errorBackoff is how long the router waits after a failed read.
const errorBackoff = time.Second

// maxInFlight is how many batches of one destination may be posted at
// once while its queue holds a backlog: as many as the client keeps idle
// connections to a host. One batch at a time capped a destination at
// BatchSize records per round of read, Barrier fsync, POST and delete:
// a few milliseconds more of fsync or of the receiver's answer (a loaded
// disk, a distant receiver) put that below the rate records were made
// at, and the backlog, and every record's wait, grew for as long as the
// load lasted.
const maxInFlight = 8

// idleExit is how long a destination's sender waits on an empty queue
// before its goroutine ends (the next record starts a new one).
const idleExit = 5 * time.Minute

// Worker delivers status records from the store's outbox to the apps'
// callback URLs. The router moves each outbox entry, by its app's
// settings at that moment, into the durable queue of its destination (or
// drops it: switch off, type not selected, no URL). Each destination has
// its own sender, so a slow or dead URL delays only its own records.
type Worker struct {
	cfg     Config
	st      Store
	apps    *appcache.Cache
	log     *slog.Logger
	client  *http.Client
	metrics *metrics
	now     func() time.Time

	mu      sync.Mutex
	senders map[store.CallbackQueue]*sender
	stopped bool // under mu: no sender starts unless started, or once Stop began

	recentMu sync.Mutex
	recent   map[string][]Delivery // per app, newest last, at most recentPerApp

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a worker; Start runs it. apps must be the cache the admin
// API updates, so a settings change applies to the next record at once.
// Its metrics are registered with reg.
func New(cfg Config, st Store, apps *appcache.Cache, log *slog.Logger, reg prometheus.Registerer) (*Worker, error) {
	if cfg.BatchSize < 1 || cfg.FlushInterval <= 0 || cfg.RetryInterval <= 0 || cfg.MaxRetries < 0 || cfg.RequestTimeout <= 0 {
		return nil, fmt.Errorf("callback: invalid config %+v", cfg)
	}
	if apps == nil {
		return nil, errors.New("callback: no app cache")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg:     cfg,
		st:      st,
		apps:    apps,
		log:     log,
		client:  webhook.NewClient(cfg.AllowedNetworks, cfg.RequestTimeout, 8),
		metrics: m,
		now:     time.Now,
		recent:  map[string][]Delivery{},
		stopped: true,
	}, nil
}

// recentPerApp is how many deliveries Recent remembers per app.
const recentPerApp = 100

// Delivery is one POST attempt, for the console's recent deliveries.
type Delivery struct {
	Time      time.Time `json:"time"`
	URL       string    `json:"url"`
	Records   int       `json:"records"`
	Attempt   int       `json:"attempt"`
	Status    int       `json:"status"` // HTTP status, 0 when there was no response
	LatencyMS float64   `json:"latency_ms"`
	Error     string    `json:"error,omitempty"`
}

// Recent returns the app's latest delivery attempts, newest first. They
// are kept in memory only, per node.
func (w *Worker) Recent(appKey string) []Delivery {
	w.recentMu.Lock()
	defer w.recentMu.Unlock()
	r := w.recent[appKey]
	out := make([]Delivery, len(r))
	for i, d := range r {
		out[len(r)-1-i] = d
	}
	return out
}

func (w *Worker) remember(appKey string, d Delivery) {
	w.recentMu.Lock()
	defer w.recentMu.Unlock()
	r := append(w.recent[appKey], d)
	if len(r) > recentPerApp {
		r = append(r[:0:0], r[len(r)-recentPerApp:]...)
	}
	w.recent[appKey] = r
}

// Track makes the app's callback series exist at 0 before anything is
// counted (cmd/devmsg passes the apps there are at start; an app created
// later gets them with its first status record).
func (w *Worker) Track(appKey string) { w.metrics.app(appKey) }

// Start resumes the queues left from the last run and starts routing. A
// stopped worker may start again (in cluster mode it runs while its node
// holds the callback lease). It returns at once: counting a large backlog
// for the backlog gauge happens first, in the background.
func (w *Worker) Start(ctx context.Context) error {
	qs, err := w.st.CallbackQueues(ctx)
	if err != nil {
		return fmt.Errorf("callback: list queues: %w", err)
	}
	w.mu.Lock()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.senders = map[store.CallbackQueue]*sender{}
	w.stopped = false
	w.mu.Unlock()
	w.wg.Add(1) // done by route, which this goroutine ends in
	go func() {
		// The backlog gauge starts from what the queues hold, counted
		// before anything is routed to them or taken off them.
		for _, q := range qs {
			n, err := w.countQueue(w.ctx, q)
			if err != nil {
				if w.ctx.Err() == nil {
					w.log.Error("callback: count queue", "app", q.AppKey, "err", err)
				}
				continue
			}
			w.metrics.backlog.WithLabelValues(q.AppKey).Add(float64(n))
		}
		for _, q := range qs {
			w.notify(q, false)
		}
		w.route()
	}()
	return nil
}

// Stop ends routing and delivery; a POST in flight is abandoned and its
// records, still queued, are sent again after the next start.
func (w *Worker) Stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	// The next start counts the queues again.
	w.metrics.backlog.Reset()
}

// countQueue counts the entries of a delivery queue.
func (w *Worker) countQueue(ctx context.Context, q store.CallbackQueue) (int, error) {
	var n int
	var after int64
	for {
		page, err := w.st.ReadCallbacks(ctx, q, after, 1000)
		if err != nil || len(page) == 0 {
			return n, err
		}
		n += len(page)
		after = page[len(page)-1].Seq
	}
}

// Redelivered is told that a dead letter of records went back to its
// queue.
func (w *Worker) Redelivered(appKey, url string, records int) {
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if stopped {
		return // another node delivers; its senders rescan now and then
	}
	w.metrics.backlog.WithLabelValues(appKey).Add(float64(records))
	// Its entries have new Seqs, but they may become visible behind the
	// sender's cursor.
	w.notify(store.CallbackQueue{AppKey: appKey, URL: url}, true)
}

// route moves outbox entries into destination queues until Stop.
func (w *Worker) route() {
	defer w.wg.Done()
	// after is where the next read starts. A rescan goes back to the
	// lowest gap (or to 0, now and then) and reading goes on from the
	// highest Seq read once it has found nothing. Reading from 0 on every
	// rescan, let alone every poll, walked the outbox's deleted entries
	// until Pebble compacted them.
	var after int64
	var gaps seqGaps
	rescanned, full, listed := time.Now(), time.Now(), time.Now()
	for {
		if time.Since(listed) >= listEvery {
			listed = time.Now()
			w.wakeQueues()
		}
		n, seqs, err := w.routeOnce(w.ctx, after, gaps.high)
		if err != nil && w.ctx.Err() == nil {
			w.log.Error("callback: route outbox", "err", err)
		}
		if err == nil {
			gaps.saw(after, seqs, time.Now())
		}
		switch {
		case n == routeChunk:
			after = seqs[n-1]
		case err == nil:
			// Everything visible after after was read.
			after = gaps.high
		}
		// Checked before reading on: a backlog that keeps every read full
		// must not keep a straggler behind the cursor.
		if time.Since(rescanned) >= rescanEvery {
			rescanned = time.Now()
			from := gaps.floor(rescanned, gapKeep)
			if time.Since(full) >= fullRescanEvery {
				from, full = 0, rescanned
			}
			if from < after {
				after = from
				continue
			}
		}
		if n == routeChunk && err == nil {
			continue
		}
		wait := w.cfg.PollInterval
		if err != nil {
			wait = errorBackoff // the store is down: do not flood the log
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// wakeQueues wakes the sender of every queue that holds entries: a dead
// letter redelivered through another node of a cluster reaches its queue
// without word to this worker.
func (w *Worker) wakeQueues() {
	qs, err := w.st.CallbackQueues(w.ctx)
	if err != nil {
		return // the route read that follows reports the store's trouble
	}
	for _, q := range qs {
		w.notify(q, true)
	}
}

// routeOnce routes one chunk of the outbox after Seq after and returns
// its size and Seqs. It reads only the entries' heads; the settings
// of each app are looked up once a chunk, and the metrics are counted per
// chunk, not per entry. An entry at or below high (the highest Seq read
// before) is a straggler: its queue's sender may have read past its Seq,
// so it is told to read its queue from the start. Left to the sender's
// own rescan, a straggler waited up to listEvery behind a batch that was
// waiting to fill once no newer record woke the sender.
func (w *Worker) routeOnce(ctx context.Context, after, high int64) (int, []int64, error) {
	heads, err := w.st.ReadOutbox(ctx, after, routeChunk)
	if err != nil || len(heads) == 0 {
		return 0, nil, err
	}
	routes := make([]store.OutboxRoute, len(heads))
	type appType struct {
		app string
		typ int
	}
	type appReason struct{ app, reason string }
	made, dropped := map[appType]int{}, map[appReason]int{}
	queued := map[store.CallbackQueue]int{}
	behind := map[store.CallbackQueue]bool{}         // queues given a straggler
	settings := map[string]*store.CallbackSettings{} // nil: no app
	for i, h := range heads {
		routes[i].Entry = h
		made[appType{h.AppKey, h.Type}]++
		cb, ok := settings[h.AppKey]
		if !ok {
			app, err := w.apps.Get(ctx, h.AppKey)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return 0, nil, err
			}
			if err == nil {
				cb = &app.Callback
			}
			settings[h.AppKey] = cb
		}
		if reason := route(cb, h, &routes[i]); reason != "" {
			dropped[appReason{h.AppKey, reason}]++
		} else {
			q := store.CallbackQueue{AppKey: h.AppKey, URL: routes[i].URL}
			queued[q]++
			if h.Seq <= high {
				behind[q] = true
			}
		}
	}
	if err := w.st.RouteOutbox(ctx, routes); err != nil {
		return 0, nil, err
	}
	for k, n := range made {
		w.metrics.app(k.app)
		w.metrics.records.WithLabelValues(k.app, strconv.Itoa(k.typ)).Add(float64(n))
	}
	for k, n := range dropped {
		w.metrics.dropped.WithLabelValues(k.app, k.reason).Add(float64(n))
	}
	for q, n := range queued {
		w.metrics.queued.WithLabelValues(q.AppKey).Add(float64(n))
		w.metrics.backlog.WithLabelValues(q.AppKey).Add(float64(n))
		w.notify(q, behind[q])
	}
	seqs := make([]int64, len(heads))
	for i, h := range heads {
		seqs[i] = h.Seq
	}
	return len(heads), seqs, nil
}

// notify wakes q's sender, starting one if there is none; with rescan,
// the sender reads its queue from the start.
func (w *Worker) notify(q store.CallbackQueue, rescan bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	s, ok := w.senders[q]
	if !ok {
		s = &sender{w: w, q: q, wake: make(chan struct{}, 1)}
		w.senders[q] = s
		w.wg.Add(1)
		go s.run()
	}
	if rescan {
		s.rescan.Store(true)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sender delivers one destination's queue: a batch at a time, or with a
// backlog up to maxInFlight batches at once, each POSTed on its own.
type sender struct {
	w      *Worker
	q      store.CallbackQueue
	wake   chan struct{}
	rescan atomic.Bool
	// failed is set by an attempt that failed: the next round posts one
	// batch, so a failing receiver is not sent maxInFlight retries.
	failed atomic.Bool
}

func (s *sender) run() {
	defer s.w.wg.Done()
	w := s.w
	var after int64 // the last Seq taken off the queue
	rescanned := time.Now()
	width := maxInFlight // batches a round may post
	for {
		if after != 0 && (s.rescan.Swap(false) || time.Since(rescanned) >= rescanEvery) {
			after, rescanned = 0, time.Now()
		}
		entries, err := w.st.ReadCallbacks(w.ctx, s.q, after, width*w.cfg.BatchSize)
		if err != nil {
			if w.ctx.Err() != nil {
				return
			}
			w.log.Error("callback: read queue", "app", s.q.AppKey, "url", s.q.URL, "err", err)
			if !s.sleep(time.Second) {
				return
			}
			continue
		}
		if len(entries) == 0 {
			if after != 0 {
				after, rescanned = 0, time.Now() // empty behind the cursor too?
				continue
			}
			if !s.idle() {
				return
			}
			continue
		}
		// A batch goes when it is full or its oldest record has waited
		// FlushInterval; until then new records may join it.
		batches := split(entries, w.cfg.BatchSize)
		if last := batches[len(batches)-1]; len(last) < w.cfg.BatchSize {
			due := time.UnixMilli(last[0].Time).Add(w.cfg.FlushInterval)
			if wait := due.Sub(w.now()); wait > 0 {
				if len(batches) == 1 {
					if !s.waitWake(wait) {
						return
					}
					continue
				}
				batches = batches[:len(batches)-1] // the full ones go now
			}
		}
		// ReadCallbacks is a durable read (store.Store): a receiver
		// never hears of a message that a crash could take back.
		if !s.deliverAll(batches) {
			return
		}
		last := batches[len(batches)-1]
		after = last[len(last)-1].Seq
		width = maxInFlight
		if s.failed.Swap(false) {
			width = 1
		}
	}
}

// split cuts entries into batches of at most size, in Seq order.
func split(entries []store.OutboxEntry, size int) [][]store.OutboxEntry {
	var out [][]store.OutboxEntry
	for len(entries) > size {
		out = append(out, entries[:size:size])
		entries = entries[size:]
	}
	return append(out, entries)
}

// deliverAll delivers the batches, each POSTed on its own goroutine, and
// returns when all are delivered or dead-lettered (or left queued after
// a store error, for the next rescan); false on Stop. They leave the
// queue in any order, and their POSTs may reach the receiver in any
// order, which the records' ids let it handle.
func (s *sender) deliverAll(batches [][]store.OutboxEntry) bool {
	if len(batches) == 1 {
		return s.deliver(batches[0])
	}
	var wg sync.WaitGroup
	var stopped atomic.Bool
	for _, b := range batches {
		wg.Go(func() {
			if !s.deliver(b) {
				stopped.Store(true)
			}
		})
	}
	wg.Wait()
	return !stopped.Load()
}

// idle waits for a wake on an empty queue; after idleExit without one the
// sender retires. It returns false when the goroutine should end.
func (s *sender) idle() bool {
	t := time.NewTimer(idleExit)
	defer t.Stop()
	select {
	case <-s.wake:
		return true
	case <-s.w.ctx.Done():
		return false
	case <-t.C:
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-s.wake: // woken meanwhile: the queue has work again
		return true
	default:
	}
	// notify holds mu too, so a record routed from now on starts a new
	// sender.
	delete(w.senders, s.q)
	return false
}

// waitWake waits up to d or for a wake; false on Stop.
func (s *sender) waitWake(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.wake:
	case <-t.C:
	case <-s.w.ctx.Done():
		return false
	}
	return true
}

// sleep waits d; false on Stop.
func (s *sender) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.w.ctx.Done():
		return false
	}
}

// deliver posts a batch until it succeeds or has failed MaxRetries
// retries, then takes it off the queue (delivered or dead-lettered).
// Before each attempt the app's settings are read again: records are
// dropped when the switch went off or their type was deselected, and
// moved when their URL is no longer configured. It returns false on Stop.
func (s *sender) deliver(entries []store.OutboxEntry) bool {
	w := s.w
	app := s.q.AppKey
	var lastErr error
	for attempt := 1; ; attempt++ {
		var ok bool
		if entries, ok = s.current(entries); !ok {
			return s.sleep(time.Second)
		}
		if len(entries) == 0 {
			return true
		}
		body, err := encodeBatch(entries)
		if err != nil {
			// Retrying cannot help; keep the records where they can be
			// seen rather than block the queue.
			lastErr = fmt.Errorf("encode batch: %w", err)
			break
		}
		start := w.now()
		var status int
		status, lastErr = w.post(app, s.q.URL, batchID(entries), body)
		w.metrics.requests.WithLabelValues(app, outcome(lastErr)).Inc()
		d := Delivery{Time: start, URL: s.q.URL, Records: len(entries), Attempt: attempt, Status: status,
			LatencyMS: float64(w.now().Sub(start).Microseconds()) / 1000}
		if lastErr != nil {
			d.Error = webhook.Reason(lastErr)
			s.failed.Store(true)
		}
		w.remember(app, d)
		if lastErr == nil {
			seqs := make([]int64, len(entries))
			now := w.now()
			for i, e := range entries {
				seqs[i] = e.Seq
				w.metrics.lag.WithLabelValues(app).Observe(now.Sub(time.UnixMilli(e.Time)).Seconds())
			}
			w.metrics.delivered.WithLabelValues(app).Add(float64(len(entries)))
			w.metrics.backlog.WithLabelValues(app).Sub(float64(len(entries)))
			w.metrics.requestSeconds.WithLabelValues(app).Observe(now.Sub(start).Seconds())
			if err := w.st.DeleteCallbacks(w.ctx, s.q, seqs); err != nil && w.ctx.Err() == nil {
				// Delivered but still queued: it goes again, which
				// at-least-once allows; the store error is what matters.
				w.log.Error("callback: delete delivered records", "app", app, "err", err)
				return s.sleep(time.Second)
			}
			return w.ctx.Err() == nil
		}
		if w.ctx.Err() != nil {
			return false
		}
		if attempt > w.cfg.MaxRetries {
			break
		}
		w.log.Warn("callback: delivery failed; will retry", "app", app, "url", s.q.URL,
			"records", len(entries), "attempt", attempt, "err", lastErr, "retry_in", w.cfg.RetryInterval)
		w.metrics.retried.WithLabelValues(app).Add(float64(len(entries)))
		if !s.sleep(w.cfg.RetryInterval) {
			return false
		}
	}
	d := store.DeadLetter{
		ID: strconv.FormatInt(entries[0].Seq, 10), AppKey: app, URL: s.q.URL, Entries: entries,
		Attempts: w.cfg.MaxRetries + 1, LastError: webhook.Reason(lastErr), Time: w.now().Unix(),
	}
	if err := w.st.PutDeadLetter(w.ctx, d); err != nil {
		if w.ctx.Err() == nil {
			w.log.Error("callback: file dead letter", "app", app, "err", err)
		}
		return s.sleep(time.Second)
	}
	w.metrics.dead.WithLabelValues(app).Add(float64(len(entries)))
	w.metrics.backlog.WithLabelValues(app).Sub(float64(len(entries)))
	w.log.Warn("callback: batch dead-lettered after every retry failed", "app", app, "url", s.q.URL,
		"records", len(entries), "dead_letter", d.ID, "err", lastErr)
	return true
}

// batchID is the webhook-id of a batch: the same for every attempt.
func batchID(entries []store.OutboxEntry) string {
	return "batch_" + entries[0].ID + "_" + entries[len(entries)-1].ID
}

// current applies the app's settings as they are now to a batch about to
// be sent and returns what is still to go to this URL; the rest is
// dropped or moved. ok is false when the settings or the store could not
// be read.
func (s *sender) current(entries []store.OutboxEntry) (_ []store.OutboxEntry, ok bool) {
	w := s.w
	app, err := w.apps.Get(w.ctx, s.q.AppKey)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	cb := app.Callback
	var reason string
	switch to := target(cb, s.q.URL); {
	case err != nil:
		reason = "no app"
	case !cb.Enabled:
		reason = "switch off"
	case to == "":
		reason = "no url"
	case to != s.q.URL:
		// The URL was deleted: what was routed to it goes where a
		// record without a configured URL goes, the default.
		if err := w.st.MoveCallbacks(w.ctx, s.q, entries, to); err != nil {
			w.log.Error("callback: move records of a deleted URL", "app", s.q.AppKey, "err", err)
			return nil, false
		}
		w.notify(store.CallbackQueue{AppKey: s.q.AppKey, URL: to}, false)
		return nil, true
	}
	keep, drop := entries, []int64(nil)
	if reason == "" {
		keep = entries[:0:0]
		for _, e := range entries {
			if cb.Sends(e.Record.Type) {
				keep = append(keep, e)
			} else {
				drop = append(drop, e.Seq)
			}
		}
		reason = "type not selected"
	} else {
		keep = nil
		for _, e := range entries {
			drop = append(drop, e.Seq)
		}
	}
	if len(drop) == 0 {
		return keep, true
	}
	if err := w.st.DeleteCallbacks(w.ctx, s.q, drop); err != nil {
		w.log.Error("callback: drop records", "app", s.q.AppKey, "err", err)
		return nil, false
	}
	w.metrics.dropped.WithLabelValues(s.q.AppKey, reason).Add(float64(len(drop)))
	w.metrics.backlog.WithLabelValues(s.q.AppKey).Sub(float64(len(drop)))
	return keep, true
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return "failed"
}

// Record is a status record as it is delivered: the source API's fields (docs/callbacks.md) and
// the entry's stable id (store.RecordID), so receivers can drop duplicates.
type Record struct {
	ID string `json:"id"`
	store.Record
}

func encodeBatch(entries []store.OutboxEntry) ([]byte, error) {
	recs := make([]Record, len(entries))
	for i, e := range entries {
		recs[i] = Record{ID: e.ID, Record: e.Record}
	}
	return json.Marshal(recs)
}

// post sends one batch and returns the HTTP status (0 without a
// response); the error is nil only on HTTP 200.
func (w *Worker) post(appKey, url, id string, body []byte) (int, error) {
	app, err := w.apps.Get(w.ctx, appKey)
	if err != nil {
		return 0, fmt.Errorf("load app: %w", err)
	}
	req, err := webhook.NewPost(w.ctx, url, "devmsg-callback", webhook.Signer{User: app.Key, Password: app.MasterSecret, Key: webhook.SigningKey(app)}, id, w.now(), body)
	if err != nil {
		return 0, err
	}
	status, err := webhook.Do(w.client, req)
	if errors.Is(err, netguard.ErrNotAllowed) {
		return 0, netguard.ErrNotAllowed // shown to the app: no address, no dial detail
	}
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return status, fmt.Errorf("HTTP %d", status)
	}
	return status, nil
}
