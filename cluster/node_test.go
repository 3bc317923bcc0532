package cluster

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/redis"
	"github.com/devmsg/devmsg/store/redis/redistest"
)

// fast timings, so a test sees nodes die and leases move in about a second.
var fast = Config{
	HeartbeatTTL:   600 * time.Millisecond,
	HeartbeatEvery: 100 * time.Millisecond,
	CheckEvery:     100 * time.Millisecond,
	ResyncEvery:    time.Hour,
	LeaseTTL:       600 * time.Millisecond,
	LeaseEvery:     100 * time.Millisecond,
}

func newStore(t *testing.T) *redis.Store {
	t.Helper()
	if !redistest.Installed() {
		t.Skip(redistest.NotInstalled)
	}
	srv, err := redistest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	st, err := redis.Open(context.Background(), redis.Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func join(t *testing.T, st *redis.Store, id int) *Node {
	t.Helper()
	cfg := fast
	cfg.NodeID, cfg.Prefix = id, st.Prefix()
	n, err := Join(context.Background(), cfg, st.Client(), st, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// crash stops the node's work the way a killed process does: its
// heartbeat and leases are left to expire.
func (n *Node) crash() {
	n.mu.Lock()
	for _, l := range n.leases {
		l.cancel()
		<-l.done
	}
	n.leases = map[string]*lease{}
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// handler records what a node is asked: the ids of the nodes said gone
// apart from the other events.
type handler struct {
	mu                  sync.Mutex
	events              []Event
	gone                []int64
	resyncs, reasserted atomic.Int64
}

func (h *handler) HandleEvent(_ context.Context, ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Kind == KindNodeGone {
		h.gone = append(h.gone, ev.ID)
		return
	}
	h.events = append(h.events, ev)
}

// saidGone reports whether node id was said gone.
func (h *handler) saidGone(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.gone, id)
}

func (h *handler) Resync(bool)                { h.resyncs.Add(1) }
func (h *handler) Reassert(_ context.Context) { h.reasserted.Add(1) }

func (h *handler) got() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJoinClaimsTheNodeID(t *testing.T) {
	st := newStore(t)
	a := join(t, st, 1)
	a.Run(&handler{})
	cfg := fast
	cfg.NodeID, cfg.Prefix = 1, st.Prefix()
	start := time.Now()
	_, err := Join(context.Background(), cfg, st.Client(), st, quiet)
	if err == nil || !strings.Contains(err.Error(), "node_id 1 is held by a running node") {
		t.Fatalf("second node with node_id 1: %v", err)
	}
	if d := time.Since(start); d < fast.HeartbeatTTL {
		t.Fatalf("gave up after %s, before the holder's heartbeat could lapse", d)
	}
	// A crashed holder's id is free once its heartbeat lapses.
	a.crash()
	b := join(t, st, 1)
	b.Close()
	// A node that closed gives its id back at once.
	start = time.Now()
	c := join(t, st, 1)
	defer c.Close()
	if d := time.Since(start); d > fast.HeartbeatTTL/2 {
		t.Fatalf("rejoining after a clean close took %s", d)
	}
}

func TestEventsReachTheirNode(t *testing.T) {
	st := newStore(t)
	a, b := join(t, st, 1), join(t, st, 2)
	ha, hb := &handler{}, &handler{}
	a.Run(ha)
	b.Run(hb)
	defer a.Close()
	defer b.Close()
	waitFor(t, "both subscribed (a resync each)", func() bool { return ha.resyncs.Load() == 1 && hb.resyncs.Load() == 1 })
	ev := Event{Kind: KindKick, App: "app", Device: "dev", Conn: "c1"}
	if err := a.Send(context.Background(), 2, ev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event at node 2", func() bool { return len(hb.got()) == 1 })
	if got := hb.got()[0]; got != ev {
		t.Fatalf("node 2 got %+v, want %+v", got, ev)
	}
	if len(ha.got()) != 0 {
		t.Fatalf("node 1 got %+v", ha.got())
	}
}

// TestStartingNodeSaysItsIDGone checks that a node starting under an id
// tells the others that the id's previous process is gone: restarted at
// once, it may take the id back before any node sees the old heartbeat
// lapse, and the events that process had yet to send are lost.
func TestStartingNodeSaysItsIDGone(t *testing.T) {
	st := newStore(t)
	b := join(t, st, 2)
	hb := &handler{}
	b.Run(hb)
	defer b.Close()
	waitFor(t, "node 2 subscribed", func() bool { return hb.resyncs.Load() == 1 })
	a := join(t, st, 1)
	a.Run(&handler{})
	defer a.Close()
	waitFor(t, "word that node 1's previous process is gone", func() bool { return hb.saidGone(1) })
}

func TestDeadNodeDevicesGoOffline(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{Name: "on-1"}, {Name: "on-2"}}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"on-1", "on-2"} {
		if _, err := st.UpdateDevice(ctx, "app", name, func(d *store.Device) error {
			d.Status, d.Node, d.LastLoginTime = 1, i+1, 1
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := join(t, st, 1), join(t, st, 2)
	a.Run(&handler{})
	hb := &handler{}
	b.Run(hb)
	defer b.Close()
	time.Sleep(3 * fast.CheckEvery)
	if d, _ := st.GetDevice(ctx, "app", "on-1"); d.Status != 1 {
		t.Fatal("a live node's device was marked offline")
	}
	a.crash()
	died := time.Now()
	waitFor(t, "node 1's device offline", func() bool {
		d, err := st.GetDevice(ctx, "app", "on-1")
		return err == nil && d.Status == 0
	})
	if d := time.Since(died); d > fast.HeartbeatTTL+3*fast.CheckEvery {
		t.Fatalf("offline %s after the node died; bound is TTL + check interval", d)
	}
	if d, _ := st.GetDevice(ctx, "app", "on-2"); d.Status != 1 {
		t.Fatal("node 2's device was marked offline too")
	}
	// Every node hears of it, so as to make up for the events the dead
	// node had yet to send.
	waitFor(t, "word that node 1 is gone", func() bool { return hb.saidGone(1) })
	// Once handled, node 1 is forgotten until it joins again.
	waitFor(t, "node 1 unregistered", func() bool {
		ids, _ := st.Client().SMembers(ctx, b.nodesKey()).Result()
		return len(ids) == 1 && ids[0] == "2"
	})

	// A node whose own heartbeat lapsed (Redis lost it) takes it again
	// and marks its devices online again, once a reset of its devices
	// that another node started meanwhile is over.
	lock := b.key("reset", "2")
	st.Client().Set(ctx, lock, "another node", time.Minute)
	st.Client().Del(ctx, b.heartbeatKey(2))
	time.Sleep(5 * fast.HeartbeatEvery)
	if hb.reasserted.Load() != 0 {
		t.Fatal("reasserted while another node was resetting this one's devices")
	}
	if alive, _ := st.Client().Exists(ctx, b.heartbeatKey(2)).Result(); alive != 1 {
		t.Fatal("heartbeat not taken again")
	}
	st.Client().Del(ctx, lock)
	waitFor(t, "node 2 reasserting", func() bool { return hb.reasserted.Load() == 1 })
}

func TestLeaseRunsOnOneNodeAndMoves(t *testing.T) {
	st := newStore(t)
	a, b := join(t, st, 1), join(t, st, 2)
	defer b.Close()
	var running [3]atomic.Int32
	lead := func(n *Node) {
		id := n.ID()
		n.Lead("work", func() error { running[id].Add(1); return nil }, func() { running[id].Add(-1) })
	}
	lead(a)
	waitFor(t, "node 1 leading", func() bool { return a.Leading("work") })
	lead(b)
	time.Sleep(3 * fast.LeaseEvery)
	if running[1].Load() != 1 || running[2].Load() != 0 || b.Leading("work") {
		t.Fatalf("running on node 1: %d, node 2: %d", running[1].Load(), running[2].Load())
	}
	a.crash()
	died := time.Now()
	waitFor(t, "node 2 leading", func() bool { return running[2].Load() == 1 })
	if d := time.Since(died); d > fast.LeaseTTL+2*fast.LeaseEvery {
		t.Fatalf("lease moved %s after its holder died", d)
	}
	// A clean close stops the work and frees the lease at once.
	b.Close()
	if running[2].Load() != 0 {
		t.Fatal("work still running after Close")
	}
	c := join(t, st, 3)
	defer c.Close()
	start := time.Now()
	c.Lead("work", func() error { return nil }, func() {})
	waitFor(t, "node 3 leading", func() bool { return c.Leading("work") })
	if d := time.Since(start); d > fast.LeaseTTL/2 {
		t.Fatalf("lease freed by Close taken after %s", d)
	}
}

func TestRateLimiterIsShared(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	l1, l2 := NewRateLimiter(st.Client(), st.Prefix()), NewRateLimiter(st.Client(), st.Prefix())
	allowed := 0
	for i := range 10 {
		l := l1
		if i%2 == 1 {
			l = l2
		}
		ok, wait, err := l.Allow(ctx, "app\x00message", 5)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			allowed++
		} else if wait <= 0 || wait > time.Second {
			t.Fatalf("refused with retry after %s", wait)
		}
	}
	if allowed != 5 {
		t.Fatalf("two limiters allowed %d of 10 at 5/s between them, want 5", allowed)
	}
	if ok, _, _ := l1.Allow(ctx, "other\x00message", 5); !ok {
		t.Fatal("another key shares the bucket")
	}
}
