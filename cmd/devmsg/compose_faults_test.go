package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// composeLoad sends messages to the devices through HAProxy. Each send
// keeps its seq_no and body through every retry, and is retried until
// answered 200, as a careful backend does.
type composeLoad struct {
	t     *testing.T
	s     *composeStack
	app   testApp
	names []string
	l     *composeLedger
	seq   atomic.Int64

	mu     sync.Mutex
	okAt   []time.Time // every 200, in order
	failed int         // attempts that got no 200
}

func newComposeLoad(t *testing.T, s *composeStack, app testApp, names []string, l *composeLedger) *composeLoad {
	return &composeLoad{t: t, s: s, app: app, names: names, l: l}
}

// next makes a new send to device.
func (ld *composeLoad) next(device string) *crashReq {
	seq := ld.seq.Add(1)
	r := &crashReq{seq: seq, device: device, body: fmt.Sprintf("compose-%d", seq)}
	ld.l.mu.Lock()
	ld.l.reqs[r.body] = r
	ld.l.mu.Unlock()
	return r
}

// try makes one attempt at r, reporting whether it was answered 200.
func (ld *composeLoad) try(r *crashReq) bool {
	st, b, err := ld.s.call(ld.app.Key, ld.app.MasterSecret, "POST", "/msg/v1/msg",
		fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q,"ttl":3600}`, r.seq, r.device, r.body))
	var resp struct{ Msgid int64 }
	if err == nil && st == http.StatusOK && json.Unmarshal(b, &resp) == nil && resp.Msgid != 0 {
		ld.l.answerAt(ld.t, r, resp.Msgid)
		ld.mu.Lock()
		ld.okAt = append(ld.okAt, time.Now())
		ld.mu.Unlock()
		return true
	}
	if err == nil && st < 500 && st != http.StatusTooManyRequests {
		ld.t.Errorf("send %s: %d %s", r.body, st, b)
	}
	ld.mu.Lock()
	ld.failed++
	ld.mu.Unlock()
	return false
}

// send retries r until it is answered 200, for up to 3 minutes.
func (ld *composeLoad) send(r *crashReq) {
	deadline := time.Now().Add(3 * time.Minute)
	for !ld.try(r) {
		if time.Now().After(deadline) {
			ld.t.Errorf("send %s: no 200 in 3 minutes", r.body)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// start sends from clients goroutines until stop is called; stop returns
// once every send made is answered.
func (ld *composeLoad) start(clients int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; ; i += clients {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				ld.send(ld.next(ld.names[i%len(ld.names)]))
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func (ld *composeLoad) run(d time.Duration, clients int) {
	stop := ld.start(clients)
	time.Sleep(d)
	stop()
}

// longestGap is the longest time without a 200 from at on.
func (ld *composeLoad) longestGap(at time.Time) time.Duration {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var worst time.Duration
	prev := at
	for _, ok := range ld.okAt {
		if ok.Before(at) {
			continue
		}
		worst = max(worst, ok.Sub(prev))
		prev = ok
	}
	return worst
}

// composeKillNode kills node2 (docker kill, SIGKILL) under load. Its
// devices lose their connections and come back through HAProxy on the
// other nodes, where every pending message reaches them.
func composeKillNode(t *testing.T, s *composeStack, f *composeFleet, ld *composeLoad) {
	stop := ld.start(4)
	time.Sleep(2 * time.Second)
	id := s.container("node2")
	killed := time.Now()
	s.docker("kill", id)
	waitFor(t, 60*time.Second, "node2's devices back through HAProxy", func() bool {
		moved, _ := f.lostSince(killed)
		return len(moved) > 0 && f.allConnected()
	})
	time.Sleep(3 * time.Second)
	stop()
	moved, back := f.lostSince(killed)
	f.waitDelivered(60 * time.Second)
	t.Logf("docker kill node2: %d devices moved, all connected elsewhere %.1fs after the kill; sends got no 200 for at most %.1fs; slowest delivery of a send answered meanwhile %.1fs",
		len(moved), back.Sub(killed).Seconds(), ld.longestGap(killed).Seconds(), ld.l.slowest(killed, time.Now()).Seconds())
	// The restart policy leaves a killed container stopped; start it as
	// an operator would. It waits for its old heartbeat to expire.
	s.compose("start", "node2")
	s.waitHealthy(2 * time.Minute)
	t.Logf("node2 healthy again %.1fs after the kill", time.Since(killed).Seconds())
}

// composePartitionNode cuts node3 off the compose network (from Redis,
// HAProxy and the other nodes; the process runs on) for longer than the
// heartbeat TTL, then puts it back. Its devices land on the other nodes;
// it refuses work until its claim on its node_id is renewed; presence
// converges; no msgid is given twice and nothing answered 200 is lost.
func composePartitionNode(t *testing.T, s *composeStack, f *composeFleet, ld *composeLoad) {
	stop := ld.start(4)
	time.Sleep(2 * time.Second)
	id := s.container("node3")
	cut := time.Now()
	s.docker("network", "disconnect", s.network(), id)
	var unready time.Duration
	waitFor(t, 30*time.Second, "node3 unready once cut off", func() bool {
		unready = time.Since(cut)
		return !s.ready("node3")
	})
	// Past the 10 s heartbeat TTL and the others' 5 s check.
	time.Sleep(time.Until(cut.Add(20 * time.Second)))
	waitFor(t, 20*time.Second, "node3's devices connected elsewhere", func() bool {
		moved, _ := f.lostSince(cut)
		return len(moved) > 0 && f.allConnected()
	})
	moved, back := f.lostSince(cut)
	healed := time.Now()
	s.docker("network", "connect", "--alias", "node3", s.network(), id)
	var ready time.Duration
	waitFor(t, 60*time.Second, "node3 ready after the partition", func() bool {
		ready = time.Since(healed)
		return s.ready("node3")
	})
	time.Sleep(3 * time.Second)
	stop()
	f.waitDelivered(60 * time.Second)
	var converged time.Duration
	waitFor(t, 30*time.Second, "every device online after the partition", func() bool {
		converged = time.Since(healed)
		for _, name := range f.names {
			if s.status(f.app, name) != 1 {
				return false
			}
		}
		return true
	})
	// And it stays so: no node marks a live device offline later.
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range f.names {
			if st := s.status(f.app, name); st != 1 {
				t.Fatalf("%s, connected, has status %d after the partition", name, st)
			}
		}
		time.Sleep(time.Second)
	}
	logs := s.docker("logs", id)
	if !strings.Contains(logs, "heartbeat had lapsed") {
		t.Error("node3's log does not say its heartbeat lapsed during the partition")
	}
	t.Logf("network disconnect node3 for %.0fs: its health check failed %.1fs after the cut; %d devices moved, all connected elsewhere %.1fs after the cut; ready %.1fs after the reconnect; every device online through HAProxy %.1fs after it",
		healed.Sub(cut).Seconds(), unready.Seconds(), len(moved), back.Sub(cut).Seconds(), ready.Seconds(), converged.Seconds())
}

// composeRestartRedis restarts Redis with SIGKILL (docker restart -t 0)
// under load: with appendfsync always, nothing answered 200 is lost.
func composeRestartRedis(t *testing.T, s *composeStack, f *composeFleet, ld *composeLoad) {
	stop := ld.start(4)
	time.Sleep(2 * time.Second)
	at := time.Now()
	s.docker("restart", "-t", "0", s.container("redis"))
	restarted := time.Since(at)
	waitFor(t, 60*time.Second, "sends answered again after the Redis restart", func() bool {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		return len(ld.okAt) > 0 && ld.okAt[len(ld.okAt)-1].After(at.Add(restarted))
	})
	time.Sleep(3 * time.Second)
	stop()
	f.waitDelivered(60 * time.Second)
	s.waitHealthy(time.Minute)
	t.Logf("docker restart -t 0 redis (%.1fs): sends got no 200 for at most %.1fs; slowest delivery of a send answered meanwhile %.1fs",
		restarted.Seconds(), ld.longestGap(at).Seconds(), ld.l.slowest(at, time.Now()).Seconds())
}

// composeDownUp leaves messages pending for an offline device, then takes
// the stack down (containers and network removed, volumes kept) and up
// again: the app, the devices and the pending messages are all there.
func composeDownUp(t *testing.T, s *composeStack, app testApp, f *composeFleet, ld *composeLoad) {
	offline := f.names[0]
	f.disconnect(offline)
	waitFor(t, 20*time.Second, offline+" offline", func() bool { return s.status(app, offline) == 0 })
	for range 3 {
		ld.send(ld.next(offline))
	}
	f.disconnectAll()
	s.compose("down", "--timeout", "40")
	took := s.up()
	for _, name := range f.names {
		if st := s.status(app, name); st != 0 {
			t.Fatalf("after compose down and up, %s: status %d, want 0 (offline)", name, st)
		}
	}
	for i := range f.names {
		f.connect(i)
	}
	f.waitDelivered(60 * time.Second)
	t.Logf("compose down, then up: healthy in %.1fs; the app, its %d devices and the pending messages all there", took.Seconds(), len(f.names))
}

// allConnected reports whether every device's client is connected.
func (f *composeFleet) allConnected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range f.names {
		c := f.clients[name]
		if c == nil || !c.IsConnectionOpen() {
			return false
		}
	}
	return true
}
