package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// clusterCmdDevice is a device of a cluster test that takes commands,
// remembers them, and answers them when answering is on.
type clusterCmdDevice struct {
	mu     sync.Mutex
	got    []string // cmd_ids in arrival order
	answer bool
	// delay holds an answer back, so the call waiting for it is
	// waiting when it arrives.
	delay  time.Duration
	c      paho.Client
	prefix string
}

func (d *clusterCmdDevice) connect(t *testing.T, addr, appKey, name, secret string) {
	t.Helper()
	d.prefix = "d/" + appKey + "/" + name + "/"
	c := connectCmdCrashDevice(t, addr, appKey, name, secret, func(m paho.Message) {
		var p struct {
			CmdID string `json:"cmd_id"`
		}
		_ = json.Unmarshal(m.Payload(), &p)
		d.mu.Lock()
		d.got = append(d.got, p.CmdID)
		answer := d.answer
		d.mu.Unlock()
		if answer {
			go func() {
				time.Sleep(d.delay)
				// A queued command can arrive before connect has
				// returned the client.
				var c paho.Client
				for deadline := time.Now().Add(5 * time.Second); c == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					d.mu.Lock()
					c = d.c
					d.mu.Unlock()
				}
				if c != nil {
					c.Publish(d.prefix+"cmd/reply", 1, false, `{"cmd_id":"`+p.CmdID+`","code":0,"result":"ok"}`)
				}
			}()
		}
	})
	d.mu.Lock()
	d.c = c
	d.mu.Unlock()
	t.Cleanup(func() { c.Disconnect(0) })
}

func (d *clusterCmdDevice) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

// TestClusterCommands runs two nodes on one Redis: a call waiting on one
// node wakes when the device's answer arrives on the other, and when
// the node holding a device is killed with SIGKILL, the command the
// device holds is answered after it reconnects to the other node, where
// a call waits for it, and a command sent meanwhile reaches it there.
func TestClusterCommands(t *testing.T) {
	rdb := redisForTest(t, "--appendfsync", "always")
	c := &testCluster{t: t, acked: map[string]string{}}
	c.nodes = []*proc{startNode(t, rdb, 1), startNode(t, rdb, 2)}
	c.createApp(0)
	secrets := c.createDevices(0, []string{"ccmd-a", "ccmd-b"})

	// The device answers on node 1; the call waits on node 2.
	a := &clusterCmdDevice{answer: true, delay: 500 * time.Millisecond}
	a.connect(t, c.nodes[0].mqtt, c.key, "ccmd-a", secrets[0])
	waitFor(t, 10*time.Second, "ccmd-a online", func() bool { return c.status(1, "ccmd-a") == 1 })
	var v cmdView
	if err := json.Unmarshal(c.ok(1, "POST", "/cmd/v1/cmd", `{"seq_no":1,"device_name":"ccmd-a","name":"ping","ttl":10,"wait":20}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.State != "succeeded" || string(v.Result) != `"ok"` {
		t.Fatalf("a call on node 2 for a device on node 1: %+v", v)
	}

	// The device holds a command on node 1, which is killed.
	b := &clusterCmdDevice{}
	b.connect(t, c.nodes[0].mqtt, c.key, "ccmd-b", secrets[1])
	waitFor(t, 10*time.Second, "ccmd-b online", func() bool { return c.status(1, "ccmd-b") == 1 })
	if err := json.Unmarshal(c.ok(1, "POST", "/cmd/v1/cmd", `{"seq_no":2,"device_name":"ccmd-b","name":"reboot","ttl":60,"timeout":60,"wait":0}`), &v); err != nil {
		t.Fatal(err)
	}
	held := v.CmdID
	waitFor(t, 10*time.Second, "ccmd-b to get the command", func() bool { return len(b.received()) == 1 })
	waited := make(chan cmdView, 1)
	go func() {
		var w cmdView
		_ = json.Unmarshal(c.ok(1, "GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=60", held), ""), &w)
		waited <- w
	}()
	if err := c.nodes[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.nodes[0].cmd.Wait()
	b.c.Disconnect(0)
	// Sent while the device is away: kept for it.
	if err := json.Unmarshal(c.ok(1, "POST", "/cmd/v1/cmd", `{"seq_no":3,"device_name":"ccmd-b","name":"reboot","ttl":60,"wait":0}`), &v); err != nil {
		t.Fatal(err)
	}
	later := v.CmdID

	// The device comes back on node 2 and answers what it holds.
	b2 := &clusterCmdDevice{answer: true}
	b2.connect(t, c.nodes[1].mqtt, c.key, "ccmd-b", secrets[1])
	b2.c.Publish(b2.prefix+"cmd/reply", 1, false, `{"cmd_id":"`+strconv.FormatInt(held, 10)+`","code":0,"result":"held"}`).Wait()
	select {
	case w := <-waited:
		if w.State != "succeeded" || string(w.Result) != `"held"` {
			t.Fatalf("the waiting call for the held command: %+v", w)
		}
	case <-time.After(70 * time.Second):
		t.Fatal("the waiting call did not return")
	}
	var got cmdView
	if err := json.Unmarshal(c.ok(1, "GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=20", later), ""), &got); err != nil {
		t.Fatal(err)
	}
	if got.State != "succeeded" {
		t.Fatalf("the command sent while the device was away: %+v (the device got %v)", got, b2.received())
	}
}

// TestCommandCrashTwoNodes is the kill -9 loop of commands on two nodes
// sharing one redis-server. In each cycle the devices are connected to
// one node, the victim, and clients send commands through both: those
// on the other node wait for each answer, which the devices give on the
// victim. The devices take up to 20 ms to acknowledge a command, so the
// victim, killed with SIGKILL at a random moment, dies with commands
// sent and not acknowledged; its devices move to the other node, get
// those again and answer there while the clients there go on, and a new
// node takes the victim's place for the next cycle, where the roles
// swap. At the end it counts what TestCommandCrashLoop counts (lost,
// phantom and duplicated commands, answers lost), all of which must be
// 0. A call that returned an answer must have returned its device's,
// and at least half of the waiting calls made while the devices were on
// the other node must have returned it within a second: the command
// reached the device through the other node, and its answer woke the
// call.
func TestCommandCrashTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rdb := redisForTest(t, "--appendfsync", "always")
	cycles := envInt(t, envCrashCycles, 20)
	clients, devices := 8, 32
	nodes := [2]*proc{startNode(t, rdb, 1), startNode(t, rdb, 2)}
	app := nodes[0].createApp(t, "cmdcrash-redis")
	names, secrets := createDevices(t, nodes[0], app, "cmdmover-", devices)
	f := newCmdCrashFleet(t, app, names, secrets, clients)
	pending := make([][]*crashReq, clients)
	var sends, retries atomic.Int64
	for cycle := range cycles {
		victim, other := cycle%2, 1-cycle%2
		devs := f.connect(nodes[victim])
		defer disconnectAll(devs)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// Stops the clients also when the cycle fails on the way.
		stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
		defer stopClients()
		f.crossing.Store(true)
		for c := range clients {
			// Even clients call the other node and wait for each answer;
			// odd ones call the victim and die with it. The wait stays within
			// the test client's 10 s timeout.
			p, wait := nodes[other], 5
			if c%2 == 1 {
				p, wait = nodes[victim], 0
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, r := crashClient(&pending[c], func(r *crashReq) bool { return f.send(p, r, wait) }, func() *crashReq { return f.next(c) }, stop)
				sends.Add(int64(s))
				retries.Add(int64(r))
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		f.crossing.Store(false)
		must(t, nodes[victim].cmd.Process.Signal(syscall.SIGKILL))
		_ = nodes[victim].cmd.Wait()
		disconnectAll(devs)
		moved := f.connect(nodes[other])
		defer disconnectAll(moved)
		time.Sleep(500 * time.Millisecond)
		stopClients()
		disconnectAll(moved)
		if t.Failed() {
			return
		}
		if cycle < cycles-1 {
			// A new node in its place: one restarted with the dead node's
			// id would first wait out the dead one's heartbeat, and an id
			// 120 cycles old is long dead (node ids end at 127).
			nodes[victim] = startNode(t, rdb, 3+cycle%120)
		}
	}

	final := cycles % 2 // the node that stayed up in the last cycle
	devs := f.connect(nodes[final])
	defer disconnectAll(devs)
	n := retryPending(t, nodes[final], pending, func(p *proc, r *crashReq) bool { return f.send(p, r, 0) },
		func(r *crashReq) string { return r.body })
	lost, phantom, duplicated, answersLost := f.l.check(t, nodes[final], app)
	crossed, quick := f.crossed.Load(), f.quick.Load()
	t.Logf("%d cycles, %d clients, %d devices: %d sends, %d retries; %d of %d calls waiting on the other node answered within 1 s; lost %d, phantom %d, duplicated %d, answers lost %d",
		cycles, clients, devices, sends.Load(), retries.Load()+int64(n), quick, crossed, len(lost), len(phantom), len(duplicated), len(answersLost))
	if quick == 0 || 2*quick < crossed {
		t.Errorf("%d of %d calls waiting on one node got the answer given on the other within 1 s", quick, crossed)
	}
	reportProblems(t, lost, phantom, duplicated, answersLost)
}
