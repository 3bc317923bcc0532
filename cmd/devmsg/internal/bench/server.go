package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// newClient returns a client with exactly one keep-alive HTTP/1.1
// connection. Each worker has its own, so connections equal workers and
// results compare with other HTTP/1.1 load tools.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			// The bench talks to the server it started, or to one the user
			// named; a self-signed certificate is expected, as the curl -k of
			// docs/api.md ("Authentication") expects it.
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
			ForceAttemptHTTP2:   false,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		},
	}
}

// do makes one request and reads the whole body, so the connection goes
// back to the pool for the next one.
func do(ctx context.Context, c *http.Client, method, url, user, pass string, body []byte) (int, []byte, error) {
	var buf bytes.Buffer
	st, err := doInto(ctx, c, method, url, user, pass, body, &buf)
	return st, buf.Bytes(), err
}

// doInto is do with the answer read into buf, emptied first, for a
// caller that reuses one buffer for many large answers.
func doInto(ctx context.Context, c *http.Client, method, url, user, pass string, body []byte, buf *bytes.Buffer) (int, error) {
	buf.Reset()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = buf.ReadFrom(resp.Body)
	return resp.StatusCode, err
}

// setup creates the bench app with unlimited rates and its devices, all
// through the public API, as a user would.
func (b *runner) setup(ctx context.Context) error {
	b.admin = newClient()
	name := "bench-" + time.Now().UTC().Format("20060102-150405")
	st, body, err := do(ctx, b.admin, http.MethodPost, b.target+"/admin/v1/apps", b.o.AdminUser, b.o.AdminPassword, fmt.Appendf(nil, `{"name":%q}`, name))
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("create app: %s", failure(st, body, err))
	}
	var app struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	if err := json.Unmarshal(body, &app); err != nil || app.Key == "" {
		return fmt.Errorf("create app: unexpected answer %.200s", body)
	}
	b.key, b.secret = app.Key, app.MasterSecret
	limits := `{"create":0,"property":0,"message":0,"query":0}`
	if slices.ContainsFunc(b.o.Workloads, func(w string) bool {
		return slices.Contains(CommandWorkloads, w) || slices.Contains(JobWorkloads, w)
	}) {
		limits = `{"create":0,"property":0,"message":0,"query":0,"command":0}`
	}
	st, body, err = do(ctx, b.admin, http.MethodPut, b.target+"/admin/v1/apps/"+b.key+"/ratelimits", b.o.AdminUser, b.o.AdminPassword, []byte(limits))
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("set rate limits: %s", failure(st, body, err))
	}
	devices := b.o.deviceCount()
	for from := 0; from < devices; from += 1000 {
		var sb strings.Builder
		sb.WriteString(`{"device":[`)
		for i := from; i < min(from+1000, devices); i++ {
			if i > from {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"name":%q}`, deviceName(i))
		}
		sb.WriteString(`]}`)
		st, body, err = do(ctx, b.admin, http.MethodPost, b.target+"/device/v1/devices", b.key, b.secret, []byte(sb.String()))
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("create devices: %s", failure(st, body, err))
		}
		var created struct {
			Resp []struct {
				DeviceName   string `json:"device_name"`
				Code         int    `json:"code"`
				Message      string `json:"message"`
				DeviceSecret string `json:"device_secret"`
			} `json:"resp"`
		}
		if err := json.Unmarshal(body, &created); err != nil {
			return fmt.Errorf("create devices: %w", err)
		}
		for _, d := range created.Resp {
			if d.Code != 0 {
				return fmt.Errorf("create device %s: code %d %s", d.DeviceName, d.Code, d.Message)
			}
			b.secrets = append(b.secrets, d.DeviceSecret)
		}
	}
	b.versions = make([]deviceVersion, b.o.Devices)
	for i := range b.versions {
		b.versions[i].v = 1 // a new device's last_desired_version
	}
	return nil
}

// settle waits, up to a minute, until the server uses under a tenth of a
// core: a saturating workload leaves flushes and compactions behind, and
// a latency run should measure its own load, not the previous one's. It
// reports whether the server became idle.
func (b *runner) settle(ctx context.Context) bool {
	deadline := time.Now().Add(time.Minute)
	prev := b.serverCPU(ctx)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Second)
		cur := b.serverCPU(ctx)
		if prev < 0 || cur < 0 {
			return true // no metrics to judge by
		}
		if cur-prev < 0.1 {
			return true
		}
		prev = cur
	}
	return false
}

// serverCPU is the CPU seconds every node has used, the sum of their
// process_cpu_seconds_total; -1 when a node cannot say.
func (b *runner) serverCPU(ctx context.Context) float64 {
	var sum float64
	for _, n := range b.nodes {
		v, found, err := b.scrape(ctx, n.base, "process_cpu_seconds_total")
		if err != nil || !found {
			return -1
		}
		sum += v
	}
	return sum
}

// metricSum adds up every series of a metric over every node's /metrics;
// a node without a series of it (a labelled counter before its first
// count) adds 0.
func (b *runner) metricSum(ctx context.Context, name string) (float64, error) {
	var sum float64
	for _, n := range b.nodes {
		v, _, err := b.scrape(ctx, n.base, name)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// scrape adds up every series of a metric on the /metrics of the node at
// base; found says whether there was any.
func (b *runner) scrape(ctx context.Context, base, name string) (sum float64, found bool, err error) {
	st, body, err := do(ctx, b.admin, http.MethodGet, base+"/metrics", "", "", nil)
	if err != nil || st != http.StatusOK {
		return 0, false, fmt.Errorf("read %s/metrics: %s", base, failure(st, body, err))
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				sum, found = sum+v, true
			}
		}
	}
	return sum, found, sc.Err()
}

// server is a `devmsg serve` child process on a free loopback port, in a
// data dir of its own.
type server struct {
	cmd           *exec.Cmd
	dir           string
	base          string
	mqtt          string // MQTT TCP address
	adminPassword string
	exited        chan struct{}
}

// serverSpec is what differs between the servers the bench starts.
type serverSpec struct {
	// binary is the devmsg executable; empty means this one.
	binary string
	// adminPassword is the admin account's; empty generates one. The
	// nodes of one run share it.
	adminPassword string
	// env is added to the environment, after and so over the defaults:
	// the store and node ID of a cluster node.
	env []string
}

// startServer starts `devmsg serve` as spec says, on free loopback ports
// in a temporary data dir, and waits until it answers /healthz.
func startServer(ctx context.Context, spec serverSpec) (*server, error) {
	binary := spec.binary
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		binary = exe
	}
	if spec.adminPassword == "" {
		spec.adminPassword = rand.Text()
	}
	dir, err := os.MkdirTemp("", "devmsg-bench-")
	if err != nil {
		return nil, err
	}
	// Both ports are held until both are picked, so they differ.
	var addrs [2]string
	var lns []net.Listener
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	addr := addrs[0]
	s := &server{dir: dir, base: "https://" + addr, mqtt: addrs[1], adminPassword: spec.adminPassword, exited: make(chan struct{})}
	s.cmd = exec.Command(binary, "serve")
	s.cmd.Env = append(os.Environ(),
		"DEVMSG_DATA_DIR="+dir, "DEVMSG_HTTP_ADDR="+addr, "DEVMSG_ADMIN_PASSWORD="+s.adminPassword,
		"DEVMSG_LOG_LEVEL=warn", "DEVMSG_MQTT_TCP_ADDR="+s.mqtt, "DEVMSG_MQTT_TLS_ADDR=", "DEVMSG_MQTT_WS_ADDR=",
		// The callback workloads' receiver listens on a loopback port, and
		// holds its first request while a backlog builds.
		"DEVMSG_CALLBACK_ALLOW_CUSTOM_PORTS=true", "DEVMSG_CALLBACK_ALLOWED_NETWORKS=127.0.0.0/8",
		"DEVMSG_CALLBACK_REQUEST_TIMEOUT=5m",
		// The bench puts thousands of clients on each of a few loopback
		// source addresses, past the default per-source caps.
		"DEVMSG_MQTT_MAX_CONNS_PER_SOURCE=0", "DEVMSG_HTTP_MAX_CONNS_PER_SOURCE=0")
	s.cmd.Env = append(s.cmd.Env, spec.env...)
	// Stdout carries the first-start app credentials, of no use here;
	// warnings and errors go to ours.
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	c := newClient()
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, err := do(ctx, c, http.MethodGet, s.base+"/healthz", "", "", nil)
		if err == nil && st == http.StatusOK {
			return s, nil
		}
		select {
		case <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s serve exited: %s", binary, s.cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.Join(errors.New("server not healthy within 30s"), err)
		}
	}
}

// stop asks the server to shut down as an operator would, kills it if it
// does not within 30s, and removes its data dir.
func (s *server) stop() { terminate(s.cmd.Process, s.exited, 30*time.Second, s.dir) }

// terminate sends p SIGTERM, kills it if exited is not closed within
// grace, waits for it and removes dir.
func terminate(p *os.Process, exited <-chan struct{}, grace time.Duration, dir string) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
	}
	os.RemoveAll(dir)
}

// node is one devmsg server of a run: its REST API and MQTT listener.
type node struct {
	base string // e.g. https://127.0.0.1:8443
	mqtt string // MQTT TCP address; "" when unknown (--target without --mqtt)
}

// deployment is what a run without --target starts: with --store redis a
// redis-server, then Options.Nodes servers sharing its store.
type deployment struct {
	redis         *redisServer // nil on the embedded store
	servers       []*server
	adminPassword string // every node's
}

// startDeployment starts o's deployment; if any part fails to start, it
// stops the parts already started.
func startDeployment(ctx context.Context, o Options) (*deployment, error) {
	d := &deployment{adminPassword: rand.Text()}
	if err := d.start(ctx, o); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// start starts the nodes one after another, so only the first finds an
// empty store and runs the first-start setup.
func (d *deployment) start(ctx context.Context, o Options) error {
	// Set even for the default store, so no DEVMSG_STORE_TYPE of the
	// caller's environment picks another.
	env := []string{"DEVMSG_STORE_TYPE=" + o.Store}
	if o.Store == StoreRedis {
		var err error
		if d.redis, err = startRedis(ctx, o.RedisFsync); err != nil {
			return err
		}
		env = append(env, "DEVMSG_STORE_REDIS_ADDRS="+d.redis.addr)
	}
	for i := range o.Nodes {
		spec := serverSpec{binary: o.Binary, adminPassword: d.adminPassword, env: env}
		if o.Store == StoreRedis {
			spec.env = append(slices.Clip(env), fmt.Sprintf("DEVMSG_NODE_ID=%d", i+1))
		}
		s, err := startServer(ctx, spec)
		if err != nil {
			return fmt.Errorf("start node %d: %w", i+1, err)
		}
		d.servers = append(d.servers, s)
	}
	return nil
}

// nodes lists the servers in start order: node 1 first.
func (d *deployment) nodes() []node {
	ns := make([]node, len(d.servers))
	for i, s := range d.servers {
		ns[i] = node{base: s.base, mqtt: s.mqtt}
	}
	return ns
}

// describe names the store and the node count, for the report.
func (d *deployment) describe() string {
	nodes := "1 node"
	if len(d.servers) != 1 {
		nodes = fmt.Sprintf("%d nodes", len(d.servers))
	}
	if d.redis == nil {
		return "store embedded (Pebble); " + nodes
	}
	version := d.redis.version
	if version == "" {
		version = "version unknown"
	}
	return fmt.Sprintf("store redis (redis-server %s, appendonly yes, appendfsync %s); %s", version, d.redis.fsync, nodes)
}

// redisPID is the redis-server's process, 0 when there is none.
func (d *deployment) redisPID() int {
	if d.redis == nil {
		return 0
	}
	return d.redis.cmd.Process.Pid
}

// stop stops the nodes, last started first, then the store under them.
func (d *deployment) stop() {
	for _, s := range slices.Backward(d.servers) {
		s.stop()
	}
	if d.redis != nil {
		d.redis.stop()
	}
}
