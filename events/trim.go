package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/store"
)

// Config is the event log's settings: the events.* keys of the service's
// configuration (docs/configuration.md).
type Config struct {
	// Retention is how long an event is kept.
	Retention time.Duration
	// MaxPerApp is the most events one app's log keeps; the oldest go
	// first.
	MaxPerApp int
	// BatchSize is the most events in one webhook POST, and Linger how
	// long a batch waits for more after its first event.
	BatchSize int
	Linger    time.Duration
}

// DefaultConfig returns the defaults of the events.* keys
// (docs/configuration.md).
func DefaultConfig() Config {
	return Config{Retention: 24 * time.Hour, MaxPerApp: 1_000_000, BatchSize: 100, Linger: 200 * time.Millisecond}
}

// TrimInterval is how often a Trimmer bounds every app's log: an event
// may outlive Retention, and a log MaxPerApp, by up to this long.
const TrimInterval = time.Minute

// TrimStore is what a Trimmer needs of the store.
type TrimStore interface {
	ListApps(ctx context.Context) ([]store.App, error)
	TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error)
}

// Trimmer keeps every app's event log within Config.Retention and
// Config.MaxPerApp, trimming each log once per TrimInterval. Trimming is
// idempotent, so every node of a cluster runs one on the shared log: no
// lease to lose, and a log stays bounded while any node is up. The events
// it deletes are counted in devmsg_events_trimmed_total.
type Trimmer struct {
	cfg     Config
	st      TrimStore
	log     *slog.Logger
	trimmed *prometheus.CounterVec
	now     func() time.Time

	mu     sync.Mutex
	cancel context.CancelFunc // set while running
	done   chan struct{}
}

// NewTrimmer returns a Trimmer of st's logs; its counter is registered
// with reg. It does nothing until Start.
func NewTrimmer(cfg Config, st TrimStore, log *slog.Logger, reg prometheus.Registerer) (*Trimmer, error) {
	trimmed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "devmsg_events_trimmed_total",
		Help: "Events deleted from an app's event log for being older than events.retention or beyond events.max_per_app.",
	}, []string{"app"})
	if err := reg.Register(trimmed); err != nil {
		return nil, fmt.Errorf("register events metrics: %w", err)
	}
	return &Trimmer{cfg: cfg, st: st, log: log, trimmed: trimmed, now: time.Now}, nil
}

// Start trims every log at once and then every TrimInterval, until Stop.
func (t *Trimmer) Start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	go t.run(ctx, t.done)
}

// Stop ends the trimming, a pass in flight included, and returns once it
// has ended.
func (t *Trimmer) Stop() {
	t.mu.Lock()
	cancel, done := t.cancel, t.done
	t.cancel = nil
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (t *Trimmer) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(TrimInterval)
	defer tick.Stop()
	for {
		if _, err := t.Trim(ctx); err != nil && ctx.Err() == nil {
			t.log.Error("trim event logs", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Trim bounds every app's log once and returns how many events it
// deleted. An app whose trim fails is logged and skipped; the first such
// error is returned after the others are trimmed.
func (t *Trimmer) Trim(ctx context.Context) (int, error) {
	apps, err := t.st.ListApps(ctx)
	if err != nil {
		return 0, fmt.Errorf("list apps: %w", err)
	}
	olderThan := t.now().Add(-t.cfg.Retention).UnixMilli()
	var total int
	var first error
	for _, app := range apps {
		n, err := t.st.TrimEvents(ctx, app.Key, olderThan, t.cfg.MaxPerApp)
		total += n
		t.trimmed.WithLabelValues(app.Key).Add(float64(n)) // 0 too: the series exists from the first trim
		if err != nil {
			if ctx.Err() != nil {
				return total, ctx.Err()
			}
			t.log.Error("trim event log", "app", app.Key, "err", err)
			if first == nil {
				first = fmt.Errorf("trim events of app %s: %w", app.Key, err)
			}
		}
	}
	return total, first
}
