package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// BroadcastStore is what broadcasts need of the store.
type BroadcastStore interface {
	BatchStore
	GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error)
	EnabledNames(ctx context.Context, appKey, tag string) ([]string, error)
	ListMessages(ctx context.Context, appKey string, before int64, limit int) ([]store.Message, error)
	CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (store.BroadcastCounts, error)
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error)
	CreateBroadcast(ctx context.Context, b store.Broadcast, targets [][]string, seqNo int64, seq *store.SeqEntry) error
	BroadcastTargets(ctx context.Context, appKey string, id int64, n int) ([]string, error)
	GetBroadcast(ctx context.Context, appKey string, id int64) (store.Broadcast, error)
	UpdateBroadcast(ctx context.Context, appKey string, id int64, fn func(*store.Broadcast) error) (store.Broadcast, error)
	ActiveBroadcasts(ctx context.Context) ([]store.Broadcast, error)
}

// Target selects a broadcast's devices: those carrying Tag, or with All
// every device of the app.
type Target struct {
	Tag string
	All bool
}

// BroadcastStats counts a broadcast's messages by state now.
type BroadcastStats = store.BroadcastCounts

// FanoutConfig paces the fan-out of broadcasts.
type FanoutConfig struct {
	// Rate is the most broadcast messages made per second, over all
	// broadcasts of this node, while no single send is made; 0 takes
	// DefaultFanoutRate, which is above what the fan-out reaches on two
	// cores (about 100,000/s; it was 100,000, a rate the fan-out is
	// meant to pass): a cap for larger machines, not a pace.
	Rate int
	// YieldRate is the most made per second while single sends are
	// being made on this node (one began in the last second), so that a
	// fan-out does not take from them the CPU and disk their latency
	// needs; 0 takes DefaultFanoutYieldRate.
	YieldRate int
	// Chunk is how many targets one chunk of a broadcast's targets
	// holds, taken when it is accepted, and so how many devices one
	// write of its fan-out reaches (the progress moves with each); 0
	// takes DefaultFanoutChunk.
	Chunk int
	// Poll is how often the worker looks for broadcasts it was not told
	// of (accepted on another node, or left by a crash); 0 takes 2 s.
	Poll time.Duration
}

// Defaults of FanoutConfig.
const (
	DefaultFanoutRate      = 250_000
	DefaultFanoutYieldRate = 2_000
	DefaultFanoutChunk     = 100
)

// Broadcaster accepts broadcasts, fans them out in the background and
// reports and cancels them (docs/api.md, "Broadcast"). One runs the fan-out per
// service: in cluster mode the node holding the broadcast lease.
type Broadcaster struct {
	svc   *Service
	store BroadcastStore
	log   *slog.Logger
	cfg   FanoutConfig
	pace  *rate.Limiter
	// yield paces the fan-out while single sends are made.
	yield *rate.Limiter
	now   func() time.Time

	// stats caches each broadcast's counts: counting reads every message
	// of the broadcast, so a poll of a large one reuses the last count
	// for a while (see Get).
	statsMu  sync.Mutex
	stats    map[int64]cachedStats
	counting singleflight.Group

	// accepted holds the store's FlagEpoch taken before the targets of
	// each broadcast accepted here were listed (see acceptedUnchanged).
	acceptedMu sync.Mutex
	accepted   map[int64]uint64

	wake    chan struct{}
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	running bool
}

// NewBroadcaster returns a Broadcaster making messages with svc on st.
func NewBroadcaster(svc *Service, st BroadcastStore, cfg FanoutConfig, log *slog.Logger) *Broadcaster {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultFanoutRate
	}
	if cfg.YieldRate <= 0 {
		cfg.YieldRate = DefaultFanoutYieldRate
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultFanoutChunk
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	return &Broadcaster{
		svc: svc, store: st, log: log, cfg: cfg, now: time.Now,
		pace:  rate.NewLimiter(rate.Limit(cfg.Rate), max(cfg.Rate/10, cfg.Chunk)),
		yield: rate.NewLimiter(rate.Limit(cfg.YieldRate), cfg.Chunk),
		wake:  make(chan struct{}, 1), stats: map[int64]cachedStats{},
		accepted: map[int64]uint64{},
	}
}

// snapshot returns the names of the app's enabled devices that match t
// now, in chunks of the configured size, and how many there are.
func (br *Broadcaster) snapshot(ctx context.Context, app string, t Target) ([][]string, int64, error) {
	tag := t.Tag
	if t.All {
		tag = ""
	}
	names, err := br.store.EnabledNames(ctx, app, tag)
	if err != nil {
		return nil, 0, fmt.Errorf("list broadcast targets: %w", err)
	}
	chunks := make([][]string, 0, (len(names)+br.cfg.Chunk-1)/br.cfg.Chunk)
	for rest := names; len(rest) > 0; {
		n := min(len(rest), br.cfg.Chunk)
		chunks, rest = append(chunks, rest[:n:n]), rest[n:]
	}
	return chunks, int64(len(names)), nil
}

// Create accepts a broadcast of req to the app's devices matching t: it
// takes their names (the enabled ones, now), then stores the broadcast
// with them and with the seq_no entry seqFor builds (given the id and
// count; it may return nil) in one durable write, and wakes the fan-out,
// which reaches those devices and no others. Errors are the store's
// (store.ErrSeqUsed when the seq_no was recorded meanwhile).
func (br *Broadcaster) Create(ctx context.Context, app store.App, t Target, req SendRequest, seqNo int64, seqFor func(id, targets int64) *store.SeqEntry) (store.Broadcast, error) {
	epoch, epochOK := flagEpochOf(br.store)
	chunks, targets, err := br.snapshot(ctx, app.Key, t)
	if err != nil {
		return store.Broadcast{}, err
	}
	b := store.Broadcast{
		ID: br.svc.ids.Next(), AppKey: app.Key, Tag: t.Tag, All: t.All,
		Body: req.Body, TTL: req.TTL, CallbackURL: req.CallbackURL,
		TimeCreate: br.now().Unix(), Targets: targets, Chunks: len(chunks), State: store.BroadcastFanningOut,
	}
	b.Params = mergeParams(req.Params, b.ID)
	if err := br.store.CreateBroadcast(ctx, b, chunks, seqNo, seqFor(b.ID, targets)); err != nil {
		return store.Broadcast{}, err
	}
	if epochOK {
		br.acceptedMu.Lock()
		if len(br.accepted) >= maxAccepted {
			clear(br.accepted) // those broadcasts' devices are read
		}
		br.accepted[b.ID] = epoch
		br.acceptedMu.Unlock()
	}
	br.Wake()
	return b, nil
}

// mergeParams returns the caller's params with broadcast_id set to id (a
// string, as msgids are in records).
func mergeParams(params json.RawMessage, id int64) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(params) > 0 {
		_ = json.Unmarshal(params, &m) // validated as an object by the caller
	}
	m["broadcast_id"] = json.RawMessage(strconv.Quote(strconv.FormatInt(id, 10)))
	return mustJSON(m)
}

// Cancel stops the app's broadcast id: no device not yet reached gets
// its message, and the fan-out worker retracts the undelivered ones
// (record 7). A cancelled broadcast stays as it is. A
// *errdefs.NotFoundError if the app has none such.
func (br *Broadcaster) Cancel(ctx context.Context, appKey string, id int64) (store.Broadcast, error) {
	b, err := br.store.UpdateBroadcast(ctx, appKey, id, func(b *store.Broadcast) error {
		if b.State != store.BroadcastCancelled {
			b.State, b.Swept = store.BroadcastCancelled, false
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return b, errdefs.NotFound("broadcast", id)
	}
	if err != nil {
		return b, fmt.Errorf("cancel broadcast %d: %w", id, err)
	}
	br.Wake()
	return b, nil
}

// Wake has the fan-out look for work now.
func (br *Broadcaster) Wake() {
	select {
	case br.wake <- struct{}{}:
	default:
	}
}

// Start runs the fan-out in the background until Stop.
func (br *Broadcaster) Start() error {
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.running {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	br.cancel, br.done, br.running = cancel, make(chan struct{}), true
	go br.run(ctx, br.done)
	return nil
}

// Stop ends the fan-out and waits for the chunk in flight; what is left
// resumes at the next Start, here or on another node.
func (br *Broadcaster) Stop() {
	br.mu.Lock()
	if !br.running {
		br.mu.Unlock()
		return
	}
	cancel, done := br.cancel, br.done
	br.running = false
	br.mu.Unlock()
	cancel()
	<-done
}
