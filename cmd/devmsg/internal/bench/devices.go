package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DeviceWorkloads measure devices over MQTT: deliveries to them and what
// they cost the server. They run only when named in Options.Workloads:
//
//   - deliver-latency: Subscribers devices connected; REST sends at Rate
//     (default 2000/s) round-robin; latency from each send's scheduled
//     instant to its arrival at the device.
//   - deliver: the same devices; Concurrency REST workers send back to
//     back; messages delivered (and acknowledged) per second.
//   - idle-memory: IdleDevices devices connected from several client
//     processes and source addresses; server RSS per device.
//   - mosquitto: Debian's Mosquitto measured the same three ways, with a
//     publisher client in place of the REST API, and the ratios of
//     devmsg's numbers to its.
//   - churn: ChurnCycles connect/subscribe/disconnect cycles over Devices
//     devices from several client processes and source addresses; the
//     server's RSS, goroutines and heap after a forced GC, before and
//     after (see churn.go).
var DeviceWorkloads = []string{"deliver-latency", "deliver", "idle-memory", "mosquitto", "churn"}

// DefaultDeliverRate is the open-loop rate of deliver-latency.
const DefaultDeliverRate = 2000

// idleClientsPerProcess keeps each client process well under the 20,000
// open files a process may hold here.
const idleClientsPerProcess = 4500

// brokerRun is one broker's numbers, for the comparison.
type brokerRun struct {
	latency, deliver *Result
	fanout           *Result // batch sends (FleetWorkloads), compared with Mosquitto's relay
	perDevice        float64 // RSS bytes per idle device (noise can make it ≤ 0 with few devices)
	idleMeasured     bool    // idle-memory ran, so perDevice holds its figure
}

// connectSubscribers connects n devices (devmsg: its devices 0..n-1 with
// their secrets; Mosquitto: anonymous) subscribed to their msg topics.
// Each message's payload is parsed by when into the instant it was
// scheduled; latencies go to hist.
func connectSubscribers(n int, dial func(i int) (*mqttConn, string, error), when func([]byte) (time.Time, bool), t *tally, mu *sync.Mutex, got *atomic.Int64) ([]*mqttConn, error) {
	conns := make([]*mqttConn, 0, n)
	for i := range n {
		c, topic, err := dial(i)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		if err := c.subscribe(topic); err != nil {
			c.close()
			closeAll(conns)
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		conns = append(conns, c)
		go func() {
			_ = c.serve(func(_ string, payload []byte) {
				at, ok := when(payload)
				if !ok {
					return
				}
				d := time.Since(at)
				got.Add(1)
				mu.Lock()
				t.add(true, "", d)
				t.noteSlow(at, d)
				mu.Unlock()
			}, nil)
		}()
	}
	return conns, nil
}

func closeAll(cs []*mqttConn) {
	for _, c := range cs {
		c.close()
	}
}

// devmsgWhen reads the scheduled instant from a devmsg message payload,
// whose msg_body the bench set to Unix nanoseconds. It finds the field in
// the payload's bytes rather than decoding the JSON: devmsg writes
// msg_body right after msgid, whose value is digits, so the first
// "msg_body":" is the key (a quote inside a JSON string is escaped). A
// decode per message cost the load generator about 3 µs, a tenth of its
// CPU in fanout, on the cores the server shares, where Mosquitto's
// subscribers parse bare digits: decoding would load devmsg's side of the
// comparison only. Any other shape is decoded.
func devmsgWhen(payload []byte) (time.Time, bool) {
	const field = `"msg_body":"`
	if i := bytes.Index(payload, []byte(field)); i >= 0 {
		rest := payload[i+len(field):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			if at, ok := parseNanos(string(rest[:j])); ok {
				return at, true
			}
		}
	}
	var m struct {
		Body string `json:"msg_body"`
	}
	if json.Unmarshal(payload, &m) != nil {
		return time.Time{}, false
	}
	return parseNanos(m.Body)
}

func parseNanos(s string) (time.Time, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// mqttNode is the node device i connects to: devices spread round-robin
// over the nodes.
func (b *runner) mqttNode(i int) int { return i % len(b.nodes) }

// sendNode is the node the REST sends to device i go through: the one
// after its MQTT node, so that with several nodes every delivery crosses
// from one node to another.
func (b *runner) sendNode(i int) int { return (i + 1) % len(b.nodes) }

// sendDevice is the k-th, round-robin, of the subscribed devices whose
// sends go through node n.
func (b *runner) sendDevice(n int, k int64) int {
	nodes := len(b.nodes)
	r := (n + nodes - 1) % nodes // sendNode(i) == n for i ≡ r (mod nodes)
	// At least one: validate keeps Subscribers ≥ Nodes.
	count := (b.o.Subscribers - r + nodes - 1) / nodes
	return r + nodes*int(k%int64(count))
}

// crossNode marks the load of a delivery workload whose sends go through
// a node other than their device's.
func (b *runner) crossNode(load string) string {
	if len(b.nodes) > 1 {
		return load + ", cross-node"
	}
	return load
}

func (b *runner) dialDevice(i int) (*mqttConn, string, error) {
	user := b.key + "/" + deviceName(i)
	c, err := dialMQTT(b.nodes[b.mqttNode(i)].mqtt, "", user, user, b.secrets[i], 60)
	return c, "d/" + b.key + "/" + deviceName(i) + "/msg", err
}

// sendAt posts a message to device i whose body is the instant at.
func (b *runner) sendAt(ctx context.Context, c *conn, i int, at time.Time) (bool, string) {
	seq := b.seqBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_name":%q,"msg_body":"%d","ttl":3600}`, seq, deviceName(i), at.UnixNano())
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/msg/v1/msg", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return false, failure(st, resp, err)
	}
	return true, ""
}

// deliverDevmsg runs deliver-latency (rate > 0) or deliver (rate 0)
// against devmsg.
func (b *runner) deliverDevmsg(ctx context.Context, workload string, rate int) (Result, error) {
	if b.nodes[0].mqtt == "" {
		return Result{}, errors.New(workload + " needs the server's MQTT address: run without --target, or give --mqtt")
	}
	t, mu, got := newTally(), &sync.Mutex{}, &atomic.Int64{}
	// Messages an earlier workload left queued (lost ones) arrive on
	// connect; they are not this workload's.
	since := time.Now()
	fresh := func(payload []byte) (time.Time, bool) {
		at, ok := devmsgWhen(payload)
		return at, ok && !at.Before(since)
	}
	conns, err := connectSubscribers(b.o.Subscribers, b.dialDevice, fresh, t, mu, got)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(conns)
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	send := func(c *conn, dev int, at time.Time) {
		ok, reason := b.sendAt(ctx, c, dev, at)
		if ok {
			sent.Add(1)
		} else if failed.Add(1) == 1 {
			firstErr.Store(reason)
		}
	}
	win := b.begin(ctx, workload)
	start := time.Now()
	if rate > 0 {
		b.openSchedule(ctx, rate, send)
	} else {
		b.backToBack(ctx, send)
	}
	sendEnd := time.Now()
	// Let the last messages arrive.
	for deadline := time.Now().Add(10 * time.Second); got.Load() < sent.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if rate == 0 {
		elapsed = sendEnd.Sub(start) // throughput over the sending window
	}
	mu.Lock()
	r := t.result(workload, b.crossNode(loadLabel(rate, b.o.Concurrency, b.o.Subscribers)), elapsed)
	mu.Unlock()
	r.Requests, r.Errors = sent.Load()+failed.Load(), failed.Load()+sent.Load()-got.Load()
	r.PerSecond = float64(got.Load()) / elapsed.Seconds()
	if v := firstErr.Load(); v != nil {
		r.FirstErrors = []string{v.(string)}
	}
	if lost := sent.Load() - got.Load(); lost > 0 {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d sent messages did not arrive within 10 s", lost))
	}
	mu.Lock()
	r.slow = t.slow
	mu.Unlock()
	return r, win.end(&r)
}

func loadLabel(rate, conns, devices int) string {
	if rate > 0 {
		return fmt.Sprintf("%d/s, %d dev", rate, devices)
	}
	return fmt.Sprintf("%d conns, %d dev", conns, devices)
}

// openSchedule calls send on LatencyConns workers at rate per second for
// Duration, each timed from its scheduled instant. Each send goes
// through its device's sendNode.
func (b *runner) openSchedule(ctx context.Context, rate int, send func(c *conn, dev int, at time.Time)) {
	type job struct {
		at  time.Time
		dev int
	}
	// A queue per node, taken from by that node's workers only.
	queues := make([]chan job, len(b.nodes))
	for k := range queues {
		queues[k] = make(chan job, max(1, min(rate, 100_000)/len(b.nodes)))
	}
	var wg, ready sync.WaitGroup
	ready.Add(b.o.LatencyConns)
	for w := range b.o.LatencyConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			ready.Done()
			for j := range queues[c.node] {
				send(c, j.dev, j.at)
			}
		}()
	}
	ready.Wait()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < int(b.o.Duration/interval) && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		dev := i % b.o.Subscribers
		queues[b.sendNode(dev)] <- job{at: at, dev: dev}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
}

// backToBack calls send on Concurrency workers back to back for
// Duration, each worker to the devices whose sendNode is its node.
func (b *runner) backToBack(ctx context.Context, send func(c *conn, dev int, at time.Time)) {
	var wg sync.WaitGroup
	next := make([]atomic.Int64, len(b.nodes)) // each node's round-robin
	end := time.Now().Add(b.o.Duration)
	for w := range b.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			for time.Now().Before(end) && ctx.Err() == nil {
				send(c, b.sendDevice(c.node, next[c.node].Add(1)), time.Now())
			}
		}()
	}
	wg.Wait()
}

// rss reads a process's resident set size in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// idleMemory connects n idle devices (one line "user,password,topic" each
// in creds) from client processes of this executable spread over
// source addresses 127.0.0.2 upwards (exe is a devmsg binary, for its
// bench-client subcommand), and reports the broker process's
// RSS growth per device once they are all connected and it has settled.
// snapshot, when not nil, is called before the devices connect (and
// before the first RSS reading) and after the second RSS reading, while
// they are still connected (see gcSnapshot).
func idleMemory(ctx context.Context, exe string, brokerPID int, addr string, creds []string, out io.Writer, name string,
	snapshot func(ctx context.Context, stage string) (memSnapshot, error)) (float64, error) {
	// The snapshot's forced GC comes before the first RSS reading, so that
	// reading does not include garbage the GC would have freed anyway.
	var base memSnapshot
	if snapshot != nil {
		var err error
		if base, err = snapshot(ctx, "before"); err != nil {
			return 0, err
		}
	}
	before, err := rss(brokerPID)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "devmsg-idle-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	ready := make(chan error, len(creds)/idleClientsPerProcess+1)
	for k := 0; k*idleClientsPerProcess < len(creds); k++ {
		part := creds[k*idleClientsPerProcess : min((k+1)*idleClientsPerProcess, len(creds))]
		file := filepath.Join(dir, strconv.Itoa(k))
		if err := os.WriteFile(file, []byte(strings.Join(part, "\n")), 0o600); err != nil {
			return 0, err
		}
		cmd := exec.CommandContext(ctx, exe, "bench-client", "--addr", addr, "--src", fmt.Sprintf("127.0.0.%d", 2+k), "--creds", file)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		procs = append(procs, cmd)
		go func() {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err == nil && !strings.HasPrefix(line, "ready") {
				err = errors.New(strings.TrimSpace(line))
			}
			ready <- err
		}()
	}
	for range procs {
		if err := <-ready; err != nil {
			return 0, fmt.Errorf("idle clients: %w", err)
		}
	}
	time.Sleep(10 * time.Second) // let the broker finish its connection work
	after, err := rss(brokerPID)
	if err != nil {
		return 0, err
	}
	per := float64(after-before) / float64(len(creds))
	fmt.Fprintf(out, "%-16s %-9s %d devices from %d processes: RSS %.1f MiB → %.1f MiB, %.1f KiB per device\n",
		"idle-memory", name, len(creds), len(procs), float64(before)/(1<<20), float64(after)/(1<<20), per/1024)
	if snapshot != nil {
		at, err := snapshot(ctx, "connected")
		if err != nil {
			return 0, err
		}
		printBreakdown(out, len(creds), base, at)
	}
	return per, nil
}

// RunIdleClient is `devmsg bench-client`: connect every device of a
// credentials file ("user,password,topic" per line; empty user for
// anonymous), subscribe, print "ready N", then keep them alive until
// killed.
func RunIdleClient(ctx context.Context, addr, src, credsFile string, out io.Writer) error {
	data, err := os.ReadFile(credsFile)
	if err != nil {
		return err
	}
	var conns []*mqttConn
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ",", 3)
		if len(parts) != 3 {
			return fmt.Errorf("%s line %d: want user,password,topic", credsFile, i+1)
		}
		id := parts[0]
		if id == "" {
			id = fmt.Sprintf("idle-%s-%d", src, i)
		}
		c, err := dialMQTT(addr, src, id, parts[0], parts[1], 300)
		if err == nil {
			err = c.subscribe(parts[2])
		}
		if err != nil {
			fmt.Fprintf(out, "error: connection %d: %v\n", i, err)
			return err
		}
		conns = append(conns, c)
		go func() { _ = c.serve(nil, nil) }()
	}
	fmt.Fprintf(out, "ready %d\n", len(conns))
	t := time.NewTicker(2 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			closeAll(conns)
			return nil
		case <-t.C:
			for _, c := range conns {
				_ = c.ping()
			}
		}
	}
}
