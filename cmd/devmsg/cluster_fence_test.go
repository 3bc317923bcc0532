package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterPausedNodeIsFenced pauses node 1 (SIGSTOP) past its
// heartbeat TTL, starts a new process with node_id 1, which takes the
// node_id, and resumes the old one under load sent through the new
// process and node 2. The old process serves nothing more: the request it
// was holding when paused is refused, it disconnects its devices and
// exits. No msgid is given twice, and every message answered with 200 is
// delivered exactly once.
func TestClusterPausedNodeIsFenced(t *testing.T) {
	rdb := redisForTest(t)
	c := &testCluster{t: t, acked: map[string]string{}}
	c.nodes = []*proc{startNode(t, rdb, 1), startNode(t, rdb, 2)}
	old := c.nodes[0]
	exited := make(chan error, 1)
	go func() { exited <- old.cmd.Wait() }()
	c.createApp(1)
	names := []string{"fdev-a", "fdev-b1", "fdev-b2"}
	secrets := c.createDevices(1, names)
	var devs []*clusterDevice
	for i, name := range names {
		devs = append(devs, &clusterDevice{name: name, secret: secrets[i], got: map[string]int{}})
	}
	onOld, onTwo := devs[0], devs[1:]
	c.connect(onOld, 0)
	for _, d := range onTwo {
		c.connect(d, 1)
	}
	c.send(0, onTwo[0].name)
	c.waitDelivered(onTwo)

	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A send the paused node holds: answered only once it resumes, when
	// its claim is long gone.
	held := make(chan int, 1)
	go func() {
		client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		req, _ := http.NewRequest("POST", old.base+"/msg/v1/msg",
			strings.NewReader(fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"held","ttl":600}`, c.seq.Add(1), onTwo[1].name)))
		req.SetBasicAuth(c.key, c.secret)
		resp, err := client.Do(req)
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	time.Sleep(11500 * time.Millisecond) // past the 10 s heartbeat TTL
	c.nodes = append(c.nodes, startNode(t, rdb, 1))
	stopLoad := c.load(onTwo, []int{1, 2})
	time.Sleep(time.Second)
	if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-held:
		if st == http.StatusOK {
			t.Error("the paused node answered 200 to a send after another process took its node_id")
		}
	case <-time.After(30 * time.Second):
		t.Error("the resumed node never answered the request it held")
	}
	// Whatever reaches it now is refused too.
	for i := range 5 {
		st, b, err := old.tryCall(c.key, c.secret, "POST", "/msg/v1/msg",
			fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"late","ttl":600}`, c.seq.Add(1), onTwo[i%2].name))
		if err == nil && st == http.StatusOK {
			t.Errorf("the resumed node accepted a send: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitLost(t, onOld)
	select {
	case err := <-exited:
		if err == nil {
			t.Error("the resumed node exited with status 0")
		}
	case <-time.After(15 * time.Second):
		t.Error("the resumed node did not stop")
	}
	time.Sleep(time.Second)
	stopLoad()
	c.waitDelivered(onTwo)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range onTwo {
		d.mu.Lock()
		for id, n := range d.got {
			if n != 1 {
				t.Errorf("%s received message %s %d times", d.name, id, n)
			}
		}
		d.mu.Unlock()
	}
	t.Logf("%d messages acknowledged, each delivered once", len(c.acked))
}

// TestClusterPresenceAfterRedisOutage stalls Redis (SIGSTOP) for longer
// than the heartbeat TTL with devices connected to two nodes, and
// disconnects one device meanwhile. Once Redis is back, that device's
// logout lands (it is retried), and the device connected to the other
// node throughout stays online: no node declares a live one dead because
// their heartbeats lapsed in the same outage.
func TestClusterPresenceAfterRedisOutage(t *testing.T) {
	rdb := redisForTest(t)
	c := &testCluster{t: t, acked: map[string]string{}}
	for id := 1; id <= 2; id++ {
		c.nodes = append(c.nodes, startNode(t, rdb, id))
	}
	c.createApp(0)
	names := []string{"odev-leaves", "odev-stays-1", "odev-stays-2"}
	secrets := c.createDevices(0, names)
	var devs []*clusterDevice
	for i, name := range names {
		d := &clusterDevice{name: name, secret: secrets[i], got: map[string]int{}}
		c.connect(d, i%2)
		devs = append(devs, d)
	}
	leaves, stays := devs[0], devs[1:]
	for _, d := range devs {
		waitFor(t, 10*time.Second, d.name+" online", func() bool { return c.status(1, d.name) == 1 })
	}

	if err := rdb.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	leaves.client.Disconnect(0)
	time.Sleep(11 * time.Second) // past the 10 s heartbeat TTL
	if err := rdb.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, leaves.name+", gone during the outage, offline", func() bool {
		st, b, err := c.nodes[1].tryCall(c.key, c.secret, "GET", "/device/v1/status?device_name="+leaves.name, "")
		var s struct{ Status int }
		return err == nil && st == http.StatusOK && json.Unmarshal(b, &s) == nil && s.Status == 0
	})
	// Long enough for every node's check for dead nodes to run more than
	// once after the outage.
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range stays {
			if st := c.status(0, d.name); st != 1 {
				t.Fatalf("%s, connected to node %d throughout, is offline after a Redis outage", d.name, d.node+1)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
