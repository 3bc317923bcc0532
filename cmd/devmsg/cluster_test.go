package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/devmsg/devmsg/store/redis"
	"github.com/devmsg/devmsg/store/redis/redistest"
)

// TestClusterThreeNodes runs three `devmsg serve` processes on one
// redis-server, as the service in cluster mode: devices spread over the
// nodes get what is sent through the others, presence follows them, one
// node is killed with SIGKILL under load and its devices carry on
// elsewhere, and Redis is killed and restarted (AOF, appendfsync always)
// under load. Nothing acknowledged is lost: every message answered with
// 200 reaches its device, and only it, and its delivery record reaches
// the callback URL, though the node delivering callbacks is the one
// killed.
func TestClusterThreeNodes(t *testing.T) {
	rdb := redisForTest(t, "--appendfsync", "always")
	c := &testCluster{t: t, acked: map[string]string{}}
	start := func(id int) *proc {
		return startNode(t, rdb, id, "--callback.allow_custom_ports=true", "--callback.allowed_networks=127.0.0.0/8",
			"--callback.flush_interval=200ms", "--callback.retry_interval=500ms", "--callback.request_timeout=2s")
	}
	// Node 1 starts first, so it takes the callback lease.
	for id := 1; id <= 3; id++ {
		c.nodes = append(c.nodes, start(id))
	}
	c.createApp(0)
	recv := newReceiver(t)
	c.ok(1, "POST", "/admin/v1/apps/"+c.key+"/callback/urls", fmt.Sprintf(`{"url":%q}`, recv.url("/cb")))
	c.ok(2, "PUT", "/admin/v1/apps/"+c.key+"/callback", `{"enabled":true,"types":[4]}`)

	const n = 12
	devs := c.spreadDevices(n)

	// A desired property set through one node reaches a device on another.
	c.ok(2, "POST", "/device/v1/property", `{"seq_no":999999,"device_name":"cdev-00","version":1,"properties":[{"name":"led","value":"on"}]}`)
	waitFor(t, 10*time.Second, "desired push to cdev-00 on node 1", func() bool { return strings.Contains(devs[0].lastDesired(), `"led"`) })

	// Takeover on another node.
	c.takeOverOnNode(devs[3], 2, devs)

	// Disabling a device through one node disconnects it on another.
	disabled := devs[n-1]
	c.disableThrough(0, disabled)

	// Kill node 1 (holding the callback lease) under load sent through
	// nodes 2 and 3. The devices it held reconnect to the others, except
	// an orphan, which the others must mark offline on their own.
	if w := c.callbackWorkers(); w != "1" {
		t.Fatalf("callback worker on node(s) %q, want 1, the first started", w)
	}
	orphan := devs[0]
	targets := devs[1 : n-1]
	c.killFirstNodeUnderLoad(targets, orphan)
	c.checkStates(2)
	c.waitCallbacks(recv)
	if w := c.callbackWorkers(); w != "2" && w != "3" {
		t.Fatalf("after node 1 died, the callback worker is on node(s) %q, want one of 2 and 3", w)
	}

	// Node 1 comes back with its node_id: devices connect to it and get
	// what is sent through the others.
	c.nodes[0] = start(1)
	back := targets[0]
	back.client.Disconnect(0)
	c.connect(back, 0)
	c.send(2, back.name)
	c.waitDelivered(targets)
	if st := c.status(1, back.name); st != 1 {
		t.Fatalf("%s on the restarted node 1: status %d", back.name, st)
	}

	// Redis crashes and restarts under load: what it acknowledged is in
	// its append-only file, and the nodes carry on.
	stopLoad := c.load(targets, []int{1, 2})
	time.Sleep(500 * time.Millisecond)
	if err := rdb.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	c.waitDelivered(targets)
	c.checkStates(1)
	c.waitCallbacks(recv)
	c.mu.Lock()
	t.Logf("%d messages acknowledged in all, every one delivered to its device", len(c.acked))
	c.mu.Unlock()

	// Presence events pair up across the nodes.
	checkClusterPresence(t, rdb.Addr, c.key, devs, orphan, disabled, devs[3])
}

// spreadDevices creates n devices, connects them round-robin to the
// nodes and sends each a message through another node; each must get it
// and show online through a third.
func (c *testCluster) spreadDevices(n int) []*clusterDevice {
	t := c.t
	t.Helper()
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("cdev-%02d", i))
	}
	secrets := c.createDevices(1, names)
	devs := make([]*clusterDevice, n)
	for i, name := range names {
		devs[i] = &clusterDevice{name: name, secret: secrets[i], got: map[string]int{}}
		c.connect(devs[i], i%3)
	}
	for i, d := range devs {
		c.send((i+1)%3, d.name)
	}
	c.waitDelivered(devs)
	for i, d := range devs {
		if st := c.status((i+2)%3, d.name); st != 1 {
			t.Fatalf("%s connected to node %d: status %d through node %d", d.name, i%3+1, st, (i+2)%3+1)
		}
	}
	return devs
}

// takeOverOnNode connects d again on node: the old connection is closed
// there, the device stays online and messages follow the new connection.
// devs are the devices whose deliveries are awaited.
func (c *testCluster) takeOverOnNode(d *clusterDevice, node int, devs []*clusterDevice) {
	t := c.t
	t.Helper()
	old := d.client
	oldLost := d.lost
	c.connect(d, node)
	select {
	case <-oldLost:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection taken over on another node was not closed")
	}
	old.Disconnect(0)
	c.send(0, d.name)
	c.waitDelivered(devs)
	if st := c.status(1, d.name); st != 1 {
		t.Fatalf("after a takeover on another node: status %d", st)
	}
}

// disableThrough disables d through node, which must disconnect it on
// the node it is connected to.
func (c *testCluster) disableThrough(node int, d *clusterDevice) {
	t := c.t
	t.Helper()
	c.ok(node, "PATCH", "/admin/v1/apps/"+c.key+"/devices/"+d.name, `{"flag":1}`)
	select {
	case <-d.lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, disabled through node %d, still connected to node %d", d.name, node+1, d.node+1)
	}
}

// killFirstNodeUnderLoad kills node 1 with SIGKILL while messages to
// targets go through nodes 2 and 3. The targets it held reconnect to the
// others; orphan, which does not, must be marked offline by them; every
// message acknowledged must reach its device.
func (c *testCluster) killFirstNodeUnderLoad(targets []*clusterDevice, orphan *clusterDevice) {
	t := c.t
	t.Helper()
	stopLoad := c.load(targets, []int{1, 2})
	time.Sleep(time.Second)
	if err := c.nodes[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for i, d := range targets {
		if d.node == 0 {
			waitLost(t, d)
			c.connect(d, 1+i%2)
		}
	}
	time.Sleep(time.Second)
	stopLoad()
	waitFor(t, 30*time.Second, "the killed node's orphan device marked offline", func() bool { return c.status(1, orphan.name) == 0 })
	t.Logf("a device of the killed node was offline %.1fs after the kill", time.Since(killed).Seconds())
	c.waitDelivered(targets)
}

// checkClusterPresence checks that presence events pair up across the
// nodes: the takeover of takenOver on another node, the kill (node_lost
// for the orphan, a takeover of the dead node's connection for those that
// moved first), the disable; every other device is still online.
func checkClusterPresence(t *testing.T, redisAddr, appKey string, devs []*clusterDevice, orphan, disabled, takenOver *clusterDevice) {
	t.Helper()
	st, err := redis.Open(context.Background(), redis.Options{Addrs: []string{redisAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, d := range devs {
		got := presenceLog(t, st, appKey, d.name)
		last := got[len(got)-1]
		var want string
		switch d {
		case orphan:
			want = "offline node_lost"
		case disabled:
			want = "offline kicked"
		default:
			want = "online" // still connected
		}
		if last != want || d == takenOver && !slices.Contains(got, "offline takeover") {
			t.Errorf("%s: presence events %q", d.name, got)
		}
	}
}

// testCluster is the test's view of the nodes: which are up, the app, and
// every message acknowledged with its device.
type testCluster struct {
	t           *testing.T
	nodes       []*proc
	key, secret string
	seq         atomic.Int64

	mu    sync.Mutex
	acked map[string]string // msgid → device
}

func (c *testCluster) createApp(node int) {
	var app struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	body := c.ok(node, "POST", "/admin/v1/apps", `{"name":"cluster"}`)
	if err := json.Unmarshal(body, &app); err != nil || app.Key == "" {
		c.t.Fatalf("create app: %v %s", err, body)
	}
	c.key, c.secret = app.Key, app.MasterSecret
}

// ok calls the API of a node, as admin for /admin paths, and fails the
// test unless it answers 200.
func (c *testCluster) ok(node int, method, path, body string) []byte {
	c.t.Helper()
	user, pass := c.key, c.secret
	if strings.HasPrefix(path, "/admin/") {
		user, pass = "admin", "durability-admin"
	}
	st, b := c.nodes[node].call(c.t, user, pass, method, path, body)
	if st != http.StatusOK {
		c.t.Fatalf("node %d: %s %s: %d %s", node+1, method, path, st, b)
	}
	return b
}

func (c *testCluster) createDevices(node int, names []string) []string {
	c.t.Helper()
	var elems []string
	for _, n := range names {
		elems = append(elems, fmt.Sprintf(`{"name":%q}`, n))
	}
	var r struct {
		Resp []struct {
			Code         int    `json:"code"`
			DeviceSecret string `json:"device_secret"`
		} `json:"resp"`
	}
	if err := json.Unmarshal(c.ok(node, "POST", "/device/v1/devices", `{"device":[`+strings.Join(elems, ",")+`]}`), &r); err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for i, e := range r.Resp {
		if e.Code != 0 {
			c.t.Fatalf("create %s: code %d", names[i], e.Code)
		}
		out = append(out, e.DeviceSecret)
	}
	return out
}

// send sends a message through a node and records it as acknowledged.
func (c *testCluster) send(node int, device string) {
	c.t.Helper()
	var r struct{ Msgid json.Number }
	body := c.ok(node, "POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"hello","ttl":600}`, c.seq.Add(1), device))
	if err := json.Unmarshal(body, &r); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.acked[r.Msgid.String()] = device
	c.mu.Unlock()
}

// load sends messages to the devices in turn through the given nodes
// from four goroutines until the returned function is called. Failed
// requests (a node or Redis down) are not acknowledged and not counted.
// A msgid answered twice fails the test.
func (c *testCluster) load(devs []*clusterDevice, nodes []int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += 4 {
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				d, node := devs[i%len(devs)], nodes[i%len(nodes)]
				st, b, err := c.nodes[node].tryCall(c.key, c.secret, "POST", "/msg/v1/msg",
					fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"load","ttl":600}`, c.seq.Add(1), d.name))
				var r struct{ Msgid json.Number }
				if err != nil || st != http.StatusOK || json.Unmarshal(b, &r) != nil {
					continue
				}
				c.mu.Lock()
				if prev, ok := c.acked[r.Msgid.String()]; ok {
					c.t.Errorf("msgid %s answered twice (%s, then %s)", r.Msgid, prev, d.name)
				}
				c.acked[r.Msgid.String()] = d.name
				c.mu.Unlock()
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// waitDelivered waits until every acknowledged message of devs reached
// its device, and checks that no device got another's message.
func (c *testCluster) waitDelivered(devs []*clusterDevice) {
	c.t.Helper()
	// Well within the 60 s resync: delivery must not wait for it.
	waitFor(c.t, 30*time.Second, "every acknowledged message at its device", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range devs {
			d.mu.Lock()
			for id := range d.got {
				if to, ok := c.acked[id]; ok && to != d.name {
					c.t.Errorf("%s received message %s sent to %s", d.name, id, to)
				}
			}
			d.mu.Unlock()
		}
		for id, to := range c.acked {
			for _, d := range devs {
				if d.name == to && !d.has(id) {
					return false
				}
			}
		}
		return true
	})
}

// checkStates reads every acknowledged message through a node and waits
// for it to be delivered: the device's PUBACK was recorded, even for
// those whose first node died.
func (c *testCluster) checkStates(node int) {
	c.t.Helper()
	c.mu.Lock()
	var ids []string
	for id := range c.acked {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	waitFor(c.t, 30*time.Second, "every acknowledged message delivered", func() bool {
		for len(ids) > 0 {
			st, b, err := c.nodes[node].tryCall(c.key, c.secret, "GET", "/msg/v1/msg?msgid="+ids[0], "")
			var m struct{ State string }
			if err != nil || st != http.StatusOK || json.Unmarshal(b, &m) != nil {
				c.t.Fatalf("message %s through node %d: %d %s %v", ids[0], node+1, st, b, err)
			}
			if m.State != "delivered" {
				return false
			}
			ids = ids[1:]
		}
		return true
	})
}

// waitCallbacks waits until a delivery record (type 4) of every
// acknowledged message reached the receiver.
func (c *testCluster) waitCallbacks(recv *receiver) {
	c.t.Helper()
	waitFor(c.t, 60*time.Second, "a delivery callback of every acknowledged message", func() bool {
		seen := map[string]bool{}
		for _, r := range recv.records() {
			if r.Type == 4 {
				seen[r.MsgID] = true
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for id := range c.acked {
			if !seen[id] {
				return false
			}
		}
		return true
	})
}

// callbackWorkers lists the live nodes (1-based) whose metrics say they
// run the callback worker.
func (c *testCluster) callbackWorkers() string {
	c.t.Helper()
	var out []string
	for i, p := range c.nodes {
		st, b, err := p.tryCall("", "", "GET", "/metrics", "")
		if err != nil {
			continue // killed
		}
		if st != http.StatusOK {
			c.t.Fatalf("node %d /metrics: %d", i+1, st)
		}
		if strings.Contains(string(b), "\ndevmsg_cluster_callback_worker 1\n") {
			out = append(out, fmt.Sprint(i+1))
		}
	}
	return strings.Join(out, ",")
}

func (c *testCluster) status(node int, device string) int {
	c.t.Helper()
	var s struct{ Status int }
	if err := json.Unmarshal(c.ok(node, "GET", "/device/v1/status?device_name="+device, ""), &s); err != nil {
		c.t.Fatal(err)
	}
	return s.Status
}

// clusterDevice is a device that moves between nodes: one paho client at
// a time, recording every msgid and desired document it receives.
type clusterDevice struct {
	name, secret string
	client       paho.Client
	node         int
	lost         chan struct{}

	mu      sync.Mutex
	got     map[string]int // msgid → times received
	desired []string
}

func (d *clusterDevice) has(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got[id] > 0
}

func (d *clusterDevice) lastDesired() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.desired) == 0 {
		return ""
	}
	return d.desired[len(d.desired)-1]
}

// connect connects the device to a node and subscribes it to its msg and
// property/desired topics.
func (c *testCluster) connect(d *clusterDevice, node int) {
	c.t.Helper()
	p := c.nodes[node]
	p.mu.Lock()
	addr := p.mqtt
	p.mu.Unlock()
	lost := make(chan struct{})
	user := c.key + "/" + d.name
	opts := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(user).SetUsername(user).SetPassword(d.secret).
		SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetOrderMatters(true).SetConnectionLostHandler(func(paho.Client, error) { close(lost) })
	cl := paho.NewClient(opts)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		c.t.Fatalf("connect %s to node %d: %v", d.name, node+1, tok.Error())
	}
	c.t.Cleanup(func() { cl.Disconnect(0) })
	prefix := "d/" + c.key + "/" + d.name + "/"
	handler := func(_ paho.Client, m paho.Message) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if m.Topic() == prefix+"msg" {
			var p struct{ Msgid string }
			_ = json.Unmarshal(m.Payload(), &p)
			d.got[p.Msgid]++
			return
		}
		d.desired = append(d.desired, string(m.Payload()))
	}
	tok := cl.SubscribeMultiple(map[string]byte{prefix + "msg": 1, prefix + "property/desired": 1}, handler)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		c.t.Fatalf("subscribe %s on node %d: %v", d.name, node+1, tok.Error())
	}
	d.client, d.node, d.lost = cl, node, lost
}

// waitLost waits until the device notices its connection is gone.
func waitLost(t *testing.T, d *clusterDevice) {
	t.Helper()
	select {
	case <-d.lost:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not notice its node die", d.name)
	}
}

// TestClusterFirstStart starts three nodes at once on an empty Redis with
// no admin password and no apps configured: they agree on one generated
// admin password and one default app, each printed once. The app's rate
// limit then holds across the nodes together.
func TestClusterFirstStart(t *testing.T) {
	rdb := redisForTest(t)
	bin := devmsgBinary(t)
	var mu sync.Mutex
	var stdout strings.Builder
	addrs := make(chan string, 3)
	for id := 1; id <= 3; id++ {
		cmd := exec.Command(bin, "serve", "--data_dir", t.TempDir(), "--http.addr", "127.0.0.1:0", "--http.tls.enabled=false",
			"--mqtt.tcp_addr=", "--mqtt.tls_addr=", "--mqtt.ws_addr=", "--store.type=redis", "--store.redis.addrs="+rdb.Addr,
			fmt.Sprintf("--node_id=%d", id), "--admin.password=")
		cmd.Env = serveEnviron()
		cmd.Stdout = &lockedWriter{&stdout, &mu}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
					addrs <- m[1]
				}
			}
		}()
	}
	var nodes []string
	for range 3 {
		select {
		case a := <-addrs:
			nodes = append(nodes, a)
		case <-time.After(30 * time.Second):
			t.Fatal("the nodes did not all start")
		}
	}
	mu.Lock()
	out := stdout.String()
	mu.Unlock()
	if n := strings.Count(out, "admin account:"); n != 1 {
		t.Fatalf("admin password printed %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "app created:"); n != 1 {
		t.Fatalf("default app printed %d times:\n%s", n, out)
	}
	pw := adminLineRE.FindStringSubmatch(out)
	if pw == nil {
		t.Fatalf("no admin password in %q", out)
	}
	app := appLineRE.FindStringSubmatch(out)
	if app == nil {
		t.Fatalf("no app credentials in %q", out)
	}
	call := func(node int, user, pass, method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+nodes[node]+path, strings.NewReader(body))
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A rate limit holds for the app across all nodes, not per node: 5
	// queries a second, spread over three nodes, let about 5 through.
	if st := call(0, "admin", pw[1], "PUT", "/admin/v1/apps/"+app[1]+"/ratelimits", `{"query":5}`); st != http.StatusOK {
		t.Fatalf("set rate limits: %d", st)
	}
	ok := 0
	for i := range 15 {
		switch st := call(i%3, app[1], app[2], "GET", "/device/v1/status?device_name=nobody", ""); st {
		case http.StatusBadRequest: // admitted: no such device
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("query %d: %d", i, st)
		}
	}
	if ok < 5 || ok > 7 {
		t.Fatalf("%d of 15 queries through three nodes admitted at 5/s, want 5 (or a refill or two)", ok)
	}
	for i, a := range nodes {
		req, _ := http.NewRequest("GET", "http://"+a+"/admin/v1/apps", nil)
		req.SetBasicAuth("admin", pw[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Apps []json.RawMessage `json:"apps"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || len(body.Apps) != 1 {
			t.Fatalf("node %d with the printed password: %d, %d apps (%v)", i+1, resp.StatusCode, len(body.Apps), err)
		}
	}
}

// redisForTest skips the test without redis-server, runs it in parallel
// and starts a redis-server of its own, stopped at the end.
func redisForTest(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	if !redistest.Installed() {
		t.Skip(redistest.NotInstalled)
	}
	t.Parallel()
	rdb, err := redistest.Start(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdb.Stop)
	return rdb
}

// startNode starts node id of a cluster on rdb, with more flags.
func startNode(t *testing.T, rdb *redistest.Server, id int, flags ...string) *proc {
	t.Helper()
	return startProc(t, t.TempDir(), append([]string{"--store.type=redis", "--store.redis.addrs=" + rdb.Addr,
		fmt.Sprintf("--node_id=%d", id), "--mqtt.tcp_addr=127.0.0.1:0"}, flags...)...)
}
