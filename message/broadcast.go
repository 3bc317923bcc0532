package message

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	FlagEpoch() (epoch uint64, ok bool)
	PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
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
	// cores (about 100,000/s; it was 100,000, which the issue 15 budget
	// asks the fan-out to pass): a cap for larger machines, not a pace.
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

// fanoutRun and fanoutRunTime bound one broadcast's turn at the full
// pace (stepRun): about this many targets, for at most about this long,
// before the next broadcast's turn.
const (
	fanoutRun     = 5000
	fanoutRunTime = 200 * time.Millisecond
)

// yieldWindow is how long after a single send the fan-out still gives
// way to single sends.
const yieldWindow = time.Second

// Broadcaster accepts broadcasts, fans them out in the background and
// reports and cancels them (DESIGN.md section 8). One runs the fan-out per
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

// cachedStats is a count of a broadcast's messages and until when it
// stands in for a new one, while the broadcast is still in state.
type cachedStats struct {
	stats BroadcastStats
	until time.Time
	state string
	// last is the broadcast's LastID when it was counted: the count
	// holds none of its messages after it.
	last int64
}

// minCachedCount is how long a count must have taken to be reused. It
// was 200 ms, and a broadcast fanned out at 50,000 messages/s was
// counted afresh on every poll (every 100 ms in devmsg bench) while it
// had fewer than about 150,000 messages: a tenth of the server's CPU.
const minCachedCount = 10 * time.Millisecond

// fanningOutCount is how long a count of a broadcast that is fanning
// out is reused at least. Its messages are mostly pending then (queued
// and state come from the broadcast itself, always current), and
// counting afresh on every poll (devmsg bench and the console poll every
// 100 ms to 1 s) read each message again a few times a second: a tenth
// of the server's CPU during a fan-out of 100,000.
const fanningOutCount = time.Second

// maxCachedStats bounds the cache; past it, the oldest go.
const maxCachedStats = 1024

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
	epoch, epochOK := br.store.FlagEpoch()
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

// Get returns the app's broadcast id with its messages counted by state;
// a *errdefs.NotFoundError if the app has none such. Counting reads each
// of the broadcast's messages, so a count is reused while the broadcast
// keeps its state: while it fans out for fanningOutCount at least, and
// any count that took over minCachedCount for five times as long as it
// took (a broadcast of 100,000 messages is counted every second or so).
// Polls then cost at most a sixth of a core, and the counts lag by as
// much. State and queued are always current; a count made before a
// cancel is not reused after it, and one made while it fanned out is
// completed with the messages made since (countRest), by each poll while
// it fans out and by the first once it is done. Each message is so
// counted once as it is made, not all at the poll that first sees the
// broadcast done: that poll counted 100,000 messages (50 to 100 ms) after
// the fan-out had ended, and what a client waited for grew by as much.
func (br *Broadcaster) Get(ctx context.Context, appKey string, id int64) (store.Broadcast, BroadcastStats, error) {
	b, err := br.store.GetBroadcast(ctx, appKey, id)
	if errors.Is(err, store.ErrNotFound) {
		return b, BroadcastStats{}, errdefs.NotFound("broadcast", id)
	}
	if err != nil {
		return b, BroadcastStats{}, fmt.Errorf("broadcast %d: %w", id, err)
	}
	now := br.now()
	br.statsMu.Lock()
	c, ok := br.stats[id]
	br.statsMu.Unlock()
	rest := ok && now.Before(c.until) && c.state == store.BroadcastFanningOut &&
		(b.State == store.BroadcastFanningOut && b.LastID > c.last || b.State == store.BroadcastDone)
	if ok && now.Before(c.until) && c.state == b.State && !rest {
		return b, c.stats, nil
	}
	if rest {
		// Concurrent polls share one count of the rest too.
		key := appKey + "\x00" + strconv.FormatInt(id, 10) + "\x00" + strconv.FormatInt(b.LastID, 10)
		v, err, _ := br.counting.Do(key, func() (any, error) {
			_, st, err := br.countRest(context.WithoutCancel(ctx), b, c)
			return st, err
		})
		if err != nil {
			return b, BroadcastStats{}, err
		}
		return b, v.(BroadcastStats), nil
	}
	// Concurrent polls share one count: each would read every message
	// otherwise (50 polls of a 100,000-device broadcast took 68 s of
	// CPU). The count outlives a poller that leaves, so the others
	// still get it.
	v, err, _ := br.counting.Do(appKey+"\x00"+strconv.FormatInt(id, 10), func() (any, error) {
		return br.count(context.WithoutCancel(ctx), b)
	})
	if err != nil {
		return b, BroadcastStats{}, err
	}
	return b, v.(BroadcastStats), nil
}

// countRest completes c, a count made while b fanned out and still
// current, while b still fans out or once it is done: the messages the
// fan-out made after it (a second's at most) are counted and added, and
// the whole stands as long as c would have. Those counted before are as
// current as during the fan-out. Reusing c alone left out the last
// steps: a target failed there (disabled since acceptance) was not
// counted as failed.
func (br *Broadcaster) countRest(ctx context.Context, b store.Broadcast, c cachedStats) (store.Broadcast, BroadcastStats, error) {
	if b.LastID > c.last {
		first := max(c.last+1, b.FirstID)
		rest, err := br.store.CountBroadcast(ctx, b.AppKey, b.ID, first, b.LastID)
		if err != nil {
			return b, BroadcastStats{}, fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
		}
		c.stats.Delivered += rest.Delivered
		c.stats.Expired += rest.Expired
		c.stats.Failed += rest.Failed
		c.stats.Retracted += rest.Retracted
		c.stats.Pending += rest.Pending
	}
	c.state, c.last = b.State, b.LastID
	br.statsMu.Lock()
	br.stats[b.ID] = c
	br.statsMu.Unlock()
	return b, c.stats, nil
}

// count counts b's messages by state and caches a count that took long
// or is of a broadcast fanning out (see Get).
func (br *Broadcaster) count(ctx context.Context, b store.Broadcast) (BroadcastStats, error) {
	now := br.now()
	st, err := br.store.CountBroadcast(ctx, b.AppKey, b.ID, b.FirstID, b.LastID)
	if err != nil {
		return st, fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
	}
	took := br.now().Sub(now)
	hold := time.Duration(0)
	if took > minCachedCount {
		hold = took * 5
	}
	if b.State == store.BroadcastFanningOut {
		hold = max(hold, fanningOutCount)
	}
	if hold > 0 {
		br.statsMu.Lock()
		if len(br.stats) >= maxCachedStats {
			clear(br.stats)
		}
		br.stats[b.ID] = cachedStats{st, br.now().Add(hold), b.State, b.LastID}
		br.statsMu.Unlock()
	}
	return st, nil
}

// eachMessage calls fn with each message of b, newest first: the app's
// messages between b's first and last msgid that belong to it. What it
// reads grows with the messages sent while b fanned out, not with all
// the app's messages.
func (br *Broadcaster) eachMessage(ctx context.Context, b store.Broadcast, fn func(store.Message) error) error {
	if b.LastID == 0 {
		return nil
	}
	before := b.LastID + 1
	for {
		ms, err := br.store.ListMessages(ctx, b.AppKey, before, 500)
		if err != nil {
			return fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
		}
		for _, m := range ms {
			if m.ID < b.FirstID {
				return nil
			}
			if m.Broadcast == b.ID {
				if err := fn(m); err != nil {
					return err
				}
			}
		}
		if len(ms) < 500 {
			return nil
		}
		before = ms[len(ms)-1].ID
	}
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

func (br *Broadcaster) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(br.cfg.Poll)
	defer t.Stop()
	for {
		bs := br.active(ctx)
		for len(bs) > 0 && ctx.Err() == nil {
			bs = br.round(ctx, bs)
			// A broadcast accepted here meanwhile joins at once; one
			// accepted on another node, at the next poll.
			select {
			case <-br.wake:
				bs = br.active(ctx)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-br.wake:
		}
	}
}

// active lists the broadcasts with fan-out or sweep work left.
func (br *Broadcaster) active(ctx context.Context) []store.Broadcast {
	bs, err := br.store.ActiveBroadcasts(ctx)
	if err != nil && ctx.Err() == nil {
		br.log.Error("broadcast: list active broadcasts", "err", err)
	}
	return bs
}

// round carries each of bs one step on, a chunk of its fan-out or, once
// cancelled, its sweep, and returns those with work left. Broadcasts
// share the fan-out chunk by chunk, so one app's large broadcasts do not
// hold back another app's small one (the outside tester's 2-device
// broadcast waited 33 s behind five of 20,000). One that fails waits for
// the next poll.
func (br *Broadcaster) round(ctx context.Context, bs []store.Broadcast) []store.Broadcast {
	next := bs[:0]
	for _, b := range bs {
		var err error
		switch {
		case b.State == store.BroadcastFanningOut && (br.sending() || b.Chunks-b.Chunk < 2):
			b, err = br.step(ctx, b)
		case b.State == store.BroadcastFanningOut:
			b, err = br.stepRun(ctx, b, max(1, fanoutRun/br.cfg.Chunk))
		case b.State == store.BroadcastCancelled && !b.Swept:
			if err = br.sweep(ctx, b); err == nil {
				b.Swept = true
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				br.log.Error("broadcast: fan-out", "app", b.AppKey, "broadcast", b.ID, "err", err)
			}
			continue
		}
		if b.Active() {
			next = append(next, b)
		} else {
			br.forgetAccepted(b.ID)
		}
	}
	return next
}

// step makes the messages of b's next chunk of targets and moves b past
// the chunk in the same write, and returns b as it is then. A crash
// before the write leaves b at the chunk, so the chunk is made again;
// after it, b is past the chunk: no device gets two messages. A step
// that finds b moved on (cancelled, or stepped by another node) writes
// nothing and returns b reread.
//
// A target deleted since b was accepted gets nothing (and is not
// queued), nor does a device created again under its name after b's
// second; one disabled since gets its message failed at once, as its
// pending messages were when it was disabled (record 5, code 3003).
func (br *Broadcaster) step(ctx context.Context, b store.Broadcast) (store.Broadcast, error) {
	w, err := br.prepare(ctx, b, b.Chunk, nil)
	if err != nil {
		return b, err
	}
	outcomes, moved, err := br.write(ctx, b, w)
	if err != nil {
		return b, err
	}
	if !moved {
		br.announce(ctx, b, w, outcomes)
	}
	return br.store.GetBroadcast(ctx, b.AppKey, b.ID)
}

// chunkWork is one chunk of a broadcast's targets made into messages,
// ready for the write that moves the broadcast past the chunk.
type chunkWork struct {
	chunk int
	// missing says the chunk's targets were gone when read: the
	// broadcast had moved on, or the chunk is lost (see write).
	missing bool
	msgs    []store.BatchMessage
	devs    []store.Device
	// epoch is the store's FlagEpoch before devs were read (epochOK
	// false if it cannot tell).
	epoch   uint64
	epochOK bool
	// prepared is what the store's PrepareStep returned for msgs: the
	// part of the step's write that needs no lock (Pebble: encoding the
	// messages and reading their devices' pending counts), done here in
	// prepare's goroutine, not in stepRun's serial write stage.
	prepared any
}

// prepare reads chunk n of b's targets and their devices, after taking
// their tokens of the pace, and makes their messages; with turns, it
// makes them (takes their msgids) in chunk n's turn.
func (br *Broadcaster) prepare(ctx context.Context, b store.Broadcast, n int, turns *chunkTurns) (chunkWork, error) {
	w := chunkWork{chunk: n}
	var names []string
	if n < b.Chunks {
		var err error
		names, err = br.store.BroadcastTargets(ctx, b.AppKey, b.ID, n)
		if errors.Is(err, store.ErrNotFound) {
			w.missing = true
			if !turns.wait(n) {
				return w, errTurnsStopped
			}
			turns.done(n)
			return w, nil
		}
		if err != nil {
			return w, err
		}
	}
	if err := br.wait(ctx, len(names)); err != nil {
		return w, err
	}
	now := br.now()
	req := SendRequest{Body: b.Body, TTL: b.TTL, CallbackURL: b.CallbackURL, Params: b.Params}
	// A target deleted since the broadcast was accepted is not among
	// devs; a device created under its name since is another device.
	w.epoch, w.epochOK = br.store.FlagEpoch()
	var devs []store.Device
	if br.acceptedUnchanged(b.ID, w.epoch, w.epochOK) {
		devs = br.targetDevices(b.AppKey, names)
	} else {
		var err error
		if devs, err = br.store.GetDevices(ctx, b.AppKey, names); err != nil {
			return w, fmt.Errorf("targets of broadcast %d: %w", b.ID, err)
		}
		devs = slices.DeleteFunc(devs, func(d store.Device) bool { return d.TimeCreate > b.TimeCreate })
	}
	if !turns.wait(n) {
		return w, errTurnsStopped
	}
	msgs := make([]store.BatchMessage, 0, len(devs))
	connected := make([]bool, 0, len(devs))
	for _, d := range devs {
		connected = append(connected, d.Status == 1) // 1: online
		bm := br.svc.newMessage(b.AppKey, enabled(d), req, now)
		if d.Flag != store.FlagEnabled {
			m := &bm.Message
			m.State = store.StateFailed
			m.Records = append(m.Records[:2:2], NewRecord(*m, store.RecordDeliveryFailure, ErrCodeDeviceDisabled, "device disabled", now))
		}
		bm.Message.Broadcast, bm.Full.Broadcast = b.ID, b.ID
		msgs = append(msgs, bm)
	}
	turns.done(n)
	w.msgs, w.devs = msgs, devs
	var err error
	if w.prepared, err = br.store.PrepareStep(ctx, b.AppKey, msgs, connected); err != nil {
		return w, fmt.Errorf("broadcast %d: %w", b.ID, err)
	}
	return w, nil
}

// maxAccepted bounds Broadcaster.accepted; past it, the epochs are
// forgotten, and those broadcasts' fan-outs read their devices.
const maxAccepted = 1024

// acceptedUnchanged reports whether the store's FlagEpoch, epoch (ok as
// FlagEpoch's), is still what it was before broadcast id's targets were
// listed when it was accepted here. Then no device's flag changed and no
// device was deleted since (see store.Fleet's FlagEpoch): every target
// still exists, is enabled, and is the device that was listed (a device
// created again under its name would have been deleted first). A
// broadcast accepted on another node or before a restart is not known
// here: its devices are read.
func (br *Broadcaster) acceptedUnchanged(id int64, epoch uint64, ok bool) bool {
	if !ok {
		return false
	}
	br.acceptedMu.Lock()
	defer br.acceptedMu.Unlock()
	at, known := br.accepted[id]
	return known && at == epoch
}

// forgetAccepted drops what acceptedUnchanged knows of broadcast id.
func (br *Broadcaster) forgetAccepted(id int64) {
	br.acceptedMu.Lock()
	delete(br.accepted, id)
	br.acceptedMu.Unlock()
}

// targetDevices returns the app's devices of names as the fan-out needs
// them when acceptedUnchanged holds, without reading them: enabled, and
// online (Status 1) when the router has them connected. Reading a chunk's
// devices was a third of a 100,000-device broadcast's preparing, most of
// it decoding whole devices to learn that nothing had changed. Only a
// store whose devices one process changes tells a FlagEpoch (not Redis,
// in cluster mode), so no device is connected to another node, and the
// router's word is all a message's delivery needs of Status.
func (br *Broadcaster) targetDevices(appKey string, names []string) []store.Device {
	devs := make([]store.Device, len(names))
	for i, n := range names {
		d := &devs[i]
		d.AppKey, d.Name, d.Flag = appKey, n, store.FlagEnabled
		if br.svc.router.Online(*d) {
			d.Status = 1 // online
		}
	}
	return devs
}

// write stores w's messages with the step past its chunk in one write
// and returns their outcomes; moved says b was no longer at the chunk
// (cancelled, or stepped by another node), and nothing was written.
func (br *Broadcaster) write(ctx context.Context, b store.Broadcast, w chunkWork) (outcomes []int, moved bool, err error) {
	if w.missing {
		now, err := br.store.GetBroadcast(ctx, b.AppKey, b.ID)
		if err != nil {
			return nil, false, err
		}
		if now.Chunk != w.chunk || now.State != store.BroadcastFanningOut {
			return nil, true, nil
		}
		// Not moved on, yet the chunk is gone: stepping past it is
		// all that can be done.
		br.log.Error("broadcast: a chunk of targets is missing", "app", b.AppKey, "broadcast", b.ID, "chunk", w.chunk)
	}
	step := &store.BroadcastStep{AppKey: b.AppKey, ID: b.ID, Chunk: w.chunk, Done: w.chunk+1 >= b.Chunks, Epoch: w.epoch, EpochOK: w.epochOK, Prepared: w.prepared}
	outcomes, err = br.store.CreateMessages(ctx, b.AppKey, w.msgs, nil, step)
	if errors.Is(err, store.ErrVersionConflict) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return outcomes, false, nil
}

// announce hands a written chunk's pending messages to the dispatcher,
// after failing those whose devices were disabled or deleted while the
// chunk was made (settleDisabled). When the store's FlagEpoch is what
// it was before the chunk's devices were read, no flag of theirs changed
// and none was deleted since: what prepare read still holds, so the
// devices are not read again.
func (br *Broadcaster) announce(ctx context.Context, b store.Broadcast, w chunkWork, outcomes []int) {
	read := func(names []string) ([]store.Device, error) { return br.store.GetDevices(ctx, b.AppKey, names) }
	if err := br.svc.announce(ctx, b.AppKey, w.msgs, w.devs, outcomes, flagMark{w.epoch, w.epochOK}, read); err != nil {
		// The step is stored; its messages wait for their devices.
		br.log.Error("broadcast: check the targets' flags after a step", "app", b.AppKey, "broadcast", b.ID, "err", err)
	}
}

// stepRun reaches up to n chunks of b, one write each as step does, in
// a pipeline: while one chunk is written, the next ones are read and made
// into messages (by stepPreparers goroutines, chunk by chunk in turn)
// and the one before is announced, so the fan-out uses more than one
// core. It stops early when b moves on or single sends begin (the next
// round steps at the yield pace), and ends its turn after
// fanoutRunTime; it returns b reread.
// A chunk made but not written when it stops is made again later, with
// new msgids: nothing of it was stored.
func (br *Broadcaster) stepRun(ctx context.Context, b store.Broadcast, n int) (store.Broadcast, error) {
	prepCtx, stop := context.WithCancel(ctx)
	defer stop()
	last := min(b.Chunk+n, b.Chunks)
	turns := newChunkTurns(b.Chunk)
	ready := make([]chan chunkWork, stepPreparers)
	var prepMu sync.Mutex
	var prepErr error
	start := br.now()
	for k := range ready {
		ready[k] = make(chan chunkWork, 1)
		go func(out chan<- chunkWork) {
			defer close(out)
			for c := b.Chunk + k; c < last; c += stepPreparers {
				if c > b.Chunk && (br.sending() || br.now().Sub(start) > fanoutRunTime) {
					turns.stop()
					return
				}
				w, err := br.prepare(prepCtx, b, c, turns)
				if err != nil {
					if !errors.Is(err, errTurnsStopped) {
						prepMu.Lock()
						prepErr = cmp.Or(prepErr, err)
						prepMu.Unlock()
					}
					turns.stop()
					return
				}
				select {
				case out <- w:
				case <-prepCtx.Done():
					return
				}
			}
		}(ready[k])
	}
	type written struct {
		w        chunkWork
		outcomes []int
	}
	announced := make(chan written, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for d := range announced {
			br.announce(ctx, b, d.w, d.outcomes)
		}
	}()
	var err error
	stopped := false
	// The chunks come in order, each from its preparer's channel; the
	// first channel closed ends the run (its preparer stopped, and the
	// chunks after it are not written).
	for c := b.Chunk; c < last; c++ {
		w, ok := <-ready[(c-b.Chunk)%stepPreparers]
		if !ok {
			break
		}
		outcomes, moved, werr := br.write(ctx, b, w)
		if werr != nil || moved {
			err, stopped = werr, true
			break
		}
		announced <- written{w, outcomes}
	}
	stop()
	turns.stop()
	for _, ch := range ready {
		for range ch { // drained, so the preparers end
		}
	}
	close(announced)
	wg.Wait()
	if err != nil {
		return b, err
	}
	if prepErr != nil && !stopped {
		return b, prepErr
	}
	return br.store.GetBroadcast(ctx, b.AppKey, b.ID)
}

// stepPreparers is how many goroutines of stepRun prepare chunks: one
// could not keep up with the write stage once the step's encoding and
// count reads moved into it (reading a chunk's devices alone was most of
// the write's time).
const stepPreparers = 2

// errTurnsStopped ends a preparer whose turn will not come: the run
// stopped.
var errTurnsStopped = errors.New("fan-out run stopped")

// chunkTurns has stepRun's preparers make their chunks' messages in
// chunk order, so that msgids grow with the chunks as they are written
// (a count made while a broadcast fans out holds the messages up to its
// LastID then, and completes itself with those after: see countRest). A
// nil *chunkTurns orders nothing.
type chunkTurns struct {
	mu      sync.Mutex
	cond    *sync.Cond
	next    int
	stopped bool
}

func newChunkTurns(first int) *chunkTurns {
	t := &chunkTurns{next: first}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// wait waits for chunk n's turn; false if the run stopped first.
func (t *chunkTurns) wait(n int) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.next != n && !t.stopped {
		t.cond.Wait()
	}
	return !t.stopped
}

// done ends chunk n's turn.
func (t *chunkTurns) done(n int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.next = n + 1
	t.mu.Unlock()
	t.cond.Broadcast()
}

// stop wakes every waiter with false.
func (t *chunkTurns) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cond.Broadcast()
}

// wait takes n messages' tokens: from the yield pace while single sends
// are made (and from the full pace too, so that neither is exceeded),
// from the full pace otherwise. A wait on the yield pace that sees the
// sends stop ends early and goes on at the full pace.
func (br *Broadcaster) wait(ctx context.Context, n int) error {
	n = max(n, 1)
	if br.sending() {
		r := br.yield.ReserveN(br.now(), min(n, br.yield.Burst()))
		delay := r.DelayFrom(br.now())
		t := time.NewTimer(delay)
		defer t.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
	waiting:
		for {
			select {
			case <-ctx.Done():
				r.Cancel()
				return ctx.Err()
			case <-t.C:
				break waiting
			case <-tick.C:
				if !br.sending() {
					r.Cancel()
					break waiting
				}
			}
		}
	}
	return br.pace.WaitN(ctx, min(n, br.pace.Burst()))
}

// sending reports whether a single send began within yieldWindow.
func (br *Broadcaster) sending() bool {
	last := br.svc.lastSend.Load()
	return last != 0 && br.now().UnixNano()-last < int64(yieldWindow)
}

// enabled returns d as an enabled device.
func enabled(d store.Device) store.Device {
	d.Flag = store.FlagEnabled
	return d
}

// errNotPending leaves a message that is no longer pending as it is.
var errNotPending = errors.New("not pending")

// sweep retracts the pending messages of a cancelled broadcast (record
// 7) and marks it swept. A crash midway sweeps again: messages already
// retracted are left alone.
func (br *Broadcaster) sweep(ctx context.Context, b store.Broadcast) error {
	err := br.eachMessage(ctx, b, func(m store.Message) error {
		if m.State != store.StatePending {
			return nil
		}
		_, err := br.store.UpdateMessage(ctx, b.AppKey, m.ID, func(m *store.Message) error {
			if m.State != store.StatePending {
				return errNotPending
			}
			m.State = store.StateRetracted
			m.Records = append(m.Records, NewRecord(*m, store.RecordRetractSuccess, 0, "", br.now()))
			return nil
		})
		if errors.Is(err, errNotPending) || errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	_, err = br.store.UpdateBroadcast(ctx, b.AppKey, b.ID, func(b *store.Broadcast) error {
		b.Swept = true
		return nil
	})
	return err
}
