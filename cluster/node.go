package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

// Config sets a node's identity and timings. Zero durations take the
// defaults below.
type Config struct {
	// NodeID is this node's node_id, unique among live nodes.
	NodeID int
	// Prefix starts every key and channel (the store's prefix).
	Prefix string
	// HeartbeatTTL is how long a node counts as alive after its last
	// heartbeat; HeartbeatEvery how often it renews it.
	HeartbeatTTL   time.Duration
	HeartbeatEvery time.Duration
	// CheckEvery is how often a node looks for dead nodes. A dead node's
	// devices are offline within HeartbeatTTL + CheckEvery of its death
	// (plus the reset itself).
	CheckEvery time.Duration
	// ResyncEvery is how often a node re-checks its devices' queues, the
	// bound on the delay of a lost event.
	ResyncEvery time.Duration
	// LeaseTTL is how long a lease outlives its holder's last renewal;
	// LeaseEvery how often it is renewed or sought.
	LeaseTTL   time.Duration
	LeaseEvery time.Duration
	// Offline, when set, makes the events that say a dead node's devices
	// went offline, written with each device's reset (store.ResetPresence).
	Offline func(store.Device) []store.Event
}

// Defaults of Config.
const (
	DefaultHeartbeatTTL   = 10 * time.Second
	DefaultHeartbeatEvery = 2 * time.Second
	DefaultCheckEvery     = 5 * time.Second
	DefaultResyncEvery    = time.Minute
	DefaultLeaseTTL       = 15 * time.Second
	DefaultLeaseEvery     = 5 * time.Second
)

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.HeartbeatTTL, DefaultHeartbeatTTL)
	set(&c.HeartbeatEvery, DefaultHeartbeatEvery)
	set(&c.CheckEvery, DefaultCheckEvery)
	set(&c.ResyncEvery, DefaultResyncEvery)
	set(&c.LeaseTTL, DefaultLeaseTTL)
	set(&c.LeaseEvery, DefaultLeaseEvery)
}

// Event kinds.
const (
	// KindWake: the device has new pending messages.
	KindWake = "wake"
	// KindDesired: the device's desired properties changed.
	KindDesired = "desired"
	// KindKick: close the device's connection (Conn, or any when "").
	KindKick = "kick"
	// KindCommand: the device has a new queued command.
	KindCommand = "cmd"
	// KindCommandCancel: tell the device command ID was cancelled.
	KindCommandCancel = "cmdcancel"
	// KindCommandDone: command ID ended (sent to every node, for the
	// calls waiting for it).
	KindCommandDone = "cmddone"
	// KindNodeGone: the process that held node ID is gone, and the
	// events it had yet to send are lost, so each node makes up for them
	// (Handler.Resync). Sent to every node by the node that marked its
	// devices offline, and by a node starting under ID, whose previous
	// process may have died without anyone seeing its heartbeat lapse.
	KindNodeGone = "nodegone"
)

// Event is what one node asks of the node holding a device.
type Event struct {
	Kind   string `json:"k"`
	App    string `json:"a"`
	Device string `json:"d"`
	Conn   string `json:"c,omitempty"`
	// ID is the command of the command kinds.
	ID int64 `json:"i,omitempty"`
}

// Handler acts on what reaches this node. Its methods must not block for
// long: events arrive one at a time.
type Handler interface {
	// HandleEvent acts on an event about a device this node may hold.
	HandleEvent(ctx context.Context, ev Event)
	// Resync makes up for lost events: it re-checks what every device
	// connected here should have (pending messages, its presence entry;
	// after resubscribed, the desired document too) and whether the
	// commands calls here wait for have ended. Events sent while this
	// node's subscription was down are lost, and so are those a node
	// that died had yet to send.
	Resync(resubscribed bool)
	// Reassert marks the devices connected here online again: while this
	// node's heartbeat had lapsed, other nodes may have marked them
	// offline.
	Reassert(ctx context.Context)
}

// Node is this process's membership of the cluster.
type Node struct {
	cfg   Config
	rdb   goredis.UniversalClient
	st    store.Store
	log   *slog.Logger
	token string // this process: a restarted node has a new one
	now   func() time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	leases  map[string]*lease
	handler Handler // set by Run

	// The local lease, in nanoseconds of the monotonic clock since
	// started: the claim is known held until validUntil; healthySince
	// (0 while heartbeats fail) is when the current run of successful
	// heartbeats began, plus one.
	started      time.Time
	validUntil   atomic.Int64
	healthySince atomic.Int64
	lost         chan struct{}
	lostOnce     sync.Once
}

// tag is the hash tag of every cluster key: one Cluster slot, so scripts
// may touch several of them.
func (n *Node) key(parts ...string) string {
	k := "{" + n.cfg.Prefix + "cluster}"
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

func (n *Node) heartbeatKey(id int) string { return n.key("node", strconv.Itoa(id)) }
func (n *Node) fenceKey(id int) string     { return n.key("fence", strconv.Itoa(id)) }
func (n *Node) nodesKey() string           { return n.key("nodes") }
func (n *Node) channel(id int) string      { return n.key("events", strconv.Itoa(id)) }
func (n *Node) allChannel() string         { return n.key("events", "all") }

// Join claims cfg.NodeID for this process. A node_id whose heartbeat is
// held by another process is waited for up to the heartbeat TTL, so a node
// restarted after a crash gets its id back; one still held then belongs to
// a live node, and Join fails. Run starts the node's work.
func Join(ctx context.Context, cfg Config, rdb goredis.UniversalClient, st store.Store, log *slog.Logger) (*Node, error) {
	cfg.defaults()
	n := &Node{cfg: cfg, rdb: rdb, st: st, log: log, token: secret.Alnum(16), now: time.Now, leases: map[string]*lease{},
		started: time.Now(), lost: make(chan struct{})}
	deadline := n.now().Add(cfg.HeartbeatTTL + time.Second)
	for {
		sent := n.mono()
		ok, err := claimScript.Run(ctx, rdb, []string{n.heartbeatKey(cfg.NodeID), n.nodesKey(), n.fenceKey(cfg.NodeID)},
			n.token, cfg.HeartbeatTTL.Milliseconds(), cfg.NodeID).Int()
		if err != nil {
			return nil, fmt.Errorf("cluster: claim node_id %d: %w", cfg.NodeID, err)
		}
		if ok == 1 {
			n.renewed(sent)
			break
		}
		if n.now().After(deadline) {
			return nil, fmt.Errorf("cluster: node_id %d is held by a running node; give every node its own node_id", cfg.NodeID)
		}
		log.Info("waiting for the previous holder of this node_id to expire", "node_id", cfg.NodeID)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	// The heartbeat runs from now on: the node's start-up work may take
	// longer than its TTL.
	n.every(cfg.HeartbeatEvery, n.heartbeat)
	// Another node may be resetting the devices of this node_id's last
	// holder: no device may connect here before it is done.
	if err := n.waitResets(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// claimScript takes a free node_id for this process: its heartbeat, its
// registration and its fence (the token of the node_id's last claimant,
// which never expires). 1 when taken, 0 when another process holds it.
var claimScript = goredis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[3])
return 1`)

// mono returns the time since the node started on the monotonic clock,
// which wall-clock steps do not move.
func (n *Node) mono() int64 { return int64(time.Since(n.started)) }

// leaseMargin is how long before its heartbeat's TTL runs out, counted
// from when the renewal was sent, a node stops trusting its claim: room
// for the clocks of the node and Redis to run at slightly different rates.
func (n *Node) leaseMargin() time.Duration { return n.cfg.HeartbeatTTL / 10 }

// renewed extends the local lease after a renewal sent at sent succeeded.
func (n *Node) renewed(sent int64) {
	select {
	case <-n.lost:
		return
	default:
	}
	n.validUntil.Store(sent + int64(n.cfg.HeartbeatTTL-n.leaseMargin()))
	n.healthySince.CompareAndSwap(0, sent+1)
}

// Valid reports whether this process is known to hold its node_id now:
// its heartbeat cannot have lapsed since the last renewal. No work may be
// done while it is false (see Fence).
func (n *Node) Valid() bool { return n.mono() < n.validUntil.Load() }

// doubt drops the local lease until the next heartbeat settles whether
// this process still holds its node_id.
func (n *Node) doubt() { n.validUntil.Store(0) }

// lose records that another process holds this node's node_id.
func (n *Node) lose() {
	n.validUntil.Store(0)
	n.lostOnce.Do(func() {
		n.log.Error("cluster: another process holds this node's node_id; this node takes no more work and stops", "node_id", n.cfg.NodeID)
		close(n.lost)
	})
}

// Lost is closed once another process holds this node's node_id: a node
// paused past its heartbeat TTL was taken for dead and replaced. The
// node's store refuses every write from then on; the process must stop
// (its supervisor restarts it, and it waits for its node_id again).
func (n *Node) Lost() <-chan struct{} { return n.lost }

// FenceKey names the key that holds the token (Token) of the last process
// to claim this node's node_id; see redis.Store.SetFence.
func (n *Node) FenceKey() string { return n.fenceKey(n.cfg.NodeID) }

// ID returns the node's node_id.
func (n *Node) ID() int { return n.cfg.NodeID }

// Token identifies this process among every node's processes, past and
// present.
func (n *Node) Token() string { return n.token }

// Run starts the heartbeat, the search for dead nodes and the event
// subscription, all feeding h, until Close.
func (n *Node) Run(h Handler) {
	n.mu.Lock()
	n.handler = h
	n.mu.Unlock()
	n.every(n.cfg.CheckEvery, n.checkNodes)
	n.every(n.cfg.ResyncEvery, func() { h.Resync(false) })
	n.wg.Add(1)
	go n.subscribe(h)
	if err := n.SendAll(n.ctx, Event{Kind: KindNodeGone, ID: int64(n.cfg.NodeID)}); err != nil {
		n.log.Error("cluster: tell the nodes this node_id's previous process is gone", "err", err)
	}
}

func (n *Node) every(d time.Duration, fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// heartbeatScript renews this process's heartbeat: 1 when it held it, 2
// when it had lapsed and is taken anew, 0 when another process holds it
// or claimed the node_id since (the fence names another process: ids and
// presence entries of this node_id are that process's now). A fence lost
// with Redis's data is set again by its holder.
var heartbeatScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
local f = redis.call('GET', KEYS[3])
if f and f ~= ARGV[1] then return 0 end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not f then redis.call('SET', KEYS[3], ARGV[1]) end
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[3], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[3])
  return 2
end
return 0`)

func (n *Node) heartbeat() {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HeartbeatEvery)
	defer cancel()
	sent := n.mono()
	res, err := heartbeatScript.Run(ctx, n.rdb, []string{n.heartbeatKey(n.cfg.NodeID), n.nodesKey(), n.FenceKey()},
		n.token, n.cfg.HeartbeatTTL.Milliseconds(), n.cfg.NodeID).Int()
	if err == nil && res != 0 {
		n.renewed(sent)
	}
	switch {
	case err != nil:
		n.healthySince.Store(0)
		if n.ctx.Err() == nil {
			n.log.Error("cluster: renew heartbeat", "err", err)
		}
	case res == 0:
		n.lose()
	case res == 2:
		n.mu.Lock()
		h := n.handler
		n.mu.Unlock()
		if h == nil {
			return // no device connected yet
		}
		n.log.Warn("cluster: this node's heartbeat had lapsed; marking its devices online again")
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if n.waitResets(n.ctx) == nil {
				h.Reassert(n.ctx)
			}
		}()
	}
}

// judging reports whether this node may judge others dead: it holds its
// claim and its own heartbeats have been succeeding for a whole TTL. Right
// after its own connection to Redis came back, the others' heartbeats may
// have lapsed in the same outage and not be renewed yet.
func (n *Node) judging() bool {
	since := n.healthySince.Load()
	return n.Valid() && since != 0 && n.mono()-(since-1) >= int64(n.cfg.HeartbeatTTL)
}

// waitResets returns once no other node is marking this node_id's devices
// offline. A node that saw this one's heartbeat lapse takes the reset
// lock, then checks the heartbeat again and resets only if it is still
// missing; the heartbeat is back when this is called, so a reset is
// either under way (its lock is held) or will not start.
func (n *Node) waitResets(ctx context.Context) error {
	lock := n.resetLock(n.cfg.NodeID)
	for {
		held, err := n.rdb.Exists(ctx, lock).Result()
		if err == nil && held == 0 {
			return nil
		}
		if err != nil {
			n.log.Error("cluster: check for a reset of this node's devices", "err", err)
		} else {
			n.log.Info("cluster: waiting for another node to finish marking this node_id's devices offline")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(n.cfg.HeartbeatEvery):
		}
	}
}

func (n *Node) resetLock(id int) string { return n.key("reset", strconv.Itoa(id)) }

// resetLockTTL bounds a reset lock whose holder died; a live holder
// renews it every third of that until its reset is done.
const resetLockTTL = time.Minute

// holdWhile renews a lock this process holds every third of resetLockTTL
// until the returned function is called.
func (n *Node) holdWhile(lock string) (stop func()) {
	done := make(chan struct{})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(resetLockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-n.ctx.Done():
				return
			case <-t.C:
				renewScript.Run(n.ctx, n.rdb, []string{lock}, n.token, resetLockTTL.Milliseconds())
			}
		}
	}()
	return func() { close(done) }
}

// forgetScript unregisters a node whose heartbeat is still absent (a node
// that came back registers again after its heartbeat, so it stays) and
// releases the reset lock if this process still holds it.
var forgetScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
end
if redis.call('GET', KEYS[3]) == ARGV[2] then
  redis.call('DEL', KEYS[3])
end
return 0`)

// checkNodes marks offline the devices of registered nodes whose heartbeat
// lapsed. One live node does each reset, under a lock that expires should
// it die meanwhile.
func (n *Node) checkNodes() {
	if !n.judging() {
		return
	}
	ctx := n.ctx
	ids, err := n.rdb.SMembers(ctx, n.nodesKey()).Result()
	if err != nil {
		if ctx.Err() == nil {
			n.log.Error("cluster: list nodes", "err", err)
		}
		return
	}
	for _, s := range ids {
		id, err := strconv.Atoi(s)
		if err != nil || id == n.cfg.NodeID {
			continue
		}
		alive, err := n.rdb.Exists(ctx, n.heartbeatKey(id)).Result()
		if err != nil || alive == 1 {
			continue
		}
		lock := n.resetLock(id)
		if ok, err := n.rdb.SetNX(ctx, lock, n.token, resetLockTTL).Result(); err != nil || !ok {
			continue
		}
		// Under the lock, look again: a node whose heartbeat came back
		// before the lock was taken keeps its devices (see waitResets).
		if alive, err := n.rdb.Exists(ctx, n.heartbeatKey(id)).Result(); err != nil || alive == 1 {
			releaseScript.Run(ctx, n.rdb, []string{lock}, n.token)
			continue
		}
		seen := n.now().Unix()
		stopRefresh := n.holdWhile(lock)
		count, err := n.st.ResetPresence(ctx, id, seen, seen, n.cfg.Offline)
		stopRefresh()
		if err != nil {
			n.log.Error("cluster: mark a dead node's devices offline", "node_id", id, "err", err)
			releaseScript.Run(ctx, n.rdb, []string{lock}, n.token)
			continue
		}
		n.log.Warn("cluster: node is gone; marked its devices offline", "node_id", id, "devices", count)
		if err := n.SendAll(ctx, Event{Kind: KindNodeGone, ID: int64(id)}); err != nil {
			n.log.Error("cluster: tell the nodes a node is gone", "node_id", id, "err", err)
		}
		if err := forgetScript.Run(ctx, n.rdb, []string{n.heartbeatKey(id), n.nodesKey(), lock}, id, n.token).Err(); err != nil {
			n.log.Error("cluster: unregister a dead node", "node_id", id, "err", err)
		}
	}
}

// subscribe hands the events of this node's channel to h, and has h
// resync whenever the subscription is made anew (at start and after a
// lost connection), as events sent meanwhile are gone.
func (n *Node) subscribe(h Handler) {
	defer n.wg.Done()
	ps := n.rdb.Subscribe(n.ctx, n.channel(n.cfg.NodeID), n.allChannel())
	go func() {
		<-n.ctx.Done()
		ps.Close() // ends the range below
	}()
	for msg := range ps.ChannelWithSubscriptions(goredis.WithChannelSize(4096)) {
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" && m.Channel == n.channel(n.cfg.NodeID) {
				// Off the event loop: it reads the store per device.
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					h.Resync(true)
				}()
			}
		case *goredis.Message:
			var ev Event
			if err := json.Unmarshal([]byte(m.Payload), &ev); err != nil {
				n.log.Error("cluster: bad event", "err", err)
				continue
			}
			h.HandleEvent(n.ctx, ev)
		}
	}
}

// Send publishes ev to the node with node_id node.
func (n *Node) Send(ctx context.Context, node int, ev Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := n.rdb.Publish(ctx, n.channel(node), data).Err(); err != nil {
		return fmt.Errorf("cluster: send %s to node %d: %w", ev.Kind, node, err)
	}
	return nil
}

// SendAll publishes ev to every node, this one included.
func (n *Node) SendAll(ctx context.Context, ev Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := n.rdb.Publish(ctx, n.allChannel(), data).Err(); err != nil {
		return fmt.Errorf("cluster: send %s to every node: %w", ev.Kind, err)
	}
	return nil
}

// Close stops the node's work, gives up its leases and its heartbeat so
// the others need not wait for them to expire.
func (n *Node) Close() {
	n.mu.Lock()
	leases := n.leases
	n.leases = map[string]*lease{}
	n.mu.Unlock()
	for _, l := range leases {
		l.close()
	}
	n.cancel()
	n.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := releaseScript.Run(ctx, n.rdb, []string{n.heartbeatKey(n.cfg.NodeID)}, n.token).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		n.log.Error("cluster: release heartbeat", "err", err)
	}
}

// releaseScript deletes a key this process holds.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
