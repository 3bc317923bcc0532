package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// runner holds what the workloads of one run share.
type runner struct {
	o Options
	// nodes are the servers measured; target is the first's base URL,
	// where setup and admin calls go.
	nodes  []node
	target string
	admin  *http.Client // setup, metrics and profiles
	key    string       // the bench app's credentials
	secret string
	// secrets are the devices' secrets, by index; serverPID is the first
	// node's process and redisPID the redis-server's, when the bench
	// started them (else 0).
	secrets   []string
	serverPID int
	redisPID  int
	exe       string // a devmsg binary, for bench-client processes

	// seq_no shares one space per app for 15 minutes; a random base keeps
	// two runs against the same app apart.
	seqBase int64
	seq     atomic.Int64
	next    atomic.Int64 // round-robin device of the sends
	sent    atomic.Int64 // successful sends, against the per-device queue bound
	warned  bool

	// versions tracks each device's last_desired_version so every
	// property set is a real write (op_code 0), not a 6003 rejection.
	versions []deviceVersion

	cb *cbReceiver // the callback workloads' receiver, once configured
}

type deviceVersion struct {
	mu sync.Mutex
	v  int64
}

func deviceName(i int) string { return fmt.Sprintf("bench-%06d", i) }

// conn is one worker's keep-alive connection to one node.
type conn struct {
	c    *http.Client
	base string // the node's base URL
	node int    // its index in runner.nodes
}

func (c *conn) close() { c.c.CloseIdleConnections() }

// nodeList is the nodes' base URLs, for the report.
func (b *runner) nodeList() string {
	bases := make([]string, len(b.nodes))
	for k, n := range b.nodes {
		bases[k] = n.base
	}
	return strings.Join(bases, ", ")
}

// send posts one message to device i.
func (b *runner) send(ctx context.Context, c *conn, i int) (bool, string) {
	seq := b.seqBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_name":%q,"msg_body":"bench message %d","ttl":3600}`, seq, deviceName(i), seq)
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/msg/v1/msg", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return false, failure(st, resp, err)
	}
	b.sent.Add(1)
	return true, ""
}

// setProperty sets two properties on device i at its current version.
// Holding the device's lock across the request keeps the version right
// even when two open-loop requests pick the same device.
func (b *runner) setProperty(ctx context.Context, c *conn, i int) (bool, string) {
	seq := b.seqBase + b.seq.Add(1)
	dv := &b.versions[i]
	dv.mu.Lock()
	defer dv.mu.Unlock()
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_name":%q,"version":%d,"properties":[{"name":"setpoint","value":%d},{"name":"mode","value":"eco"}]}`,
		seq, deviceName(i), dv.v, seq%100)
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/device/v1/property", b.key, b.secret, body)
	var r struct {
		OpCode *int `json:"op_code"`
	}
	if err == nil && st == http.StatusOK && json.Unmarshal(resp, &r) == nil && r.OpCode != nil && *r.OpCode == 0 {
		dv.v++
		return true, ""
	}
	// A timeout may have applied the set; a 6003 says the version moved.
	// Either way, read the version back so one failure stays one error.
	if v, rerr := b.desiredVersion(ctx, c, i); rerr == nil {
		dv.v = v
	}
	return false, failure(st, resp, err)
}

func (b *runner) desiredVersion(ctx context.Context, c *conn, i int) (int64, error) {
	st, resp, err := do(ctx, c.c, http.MethodGet, c.base+"/device/v1/property?device_name="+deviceName(i), b.key, b.secret, nil)
	if err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("get property: %s", failure(st, resp, err))
	}
	var r struct {
		LastDesiredVersion int64 `json:"last_desired_version"`
	}
	return r.LastDesiredVersion, json.Unmarshal(resp, &r)
}

func failure(status int, body []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("HTTP %d %.150s", status, body)
}

// request runs one request of base ("send" or "property") for device i.
func (b *runner) request(ctx context.Context, c *conn, base string, i int) (bool, string) {
	if base == "send" {
		return b.send(ctx, c, i)
	}
	return b.setProperty(ctx, c, i)
}

// tally accumulates one worker's outcomes; workers merge theirs at the
// end, so recording takes no lock.
type tally struct {
	hist   *hdrhistogram.Histogram
	n, bad int64
	first  []string
	slow   []slowSample // the slowest, by noteSlow
}

// slowSample is one latency and the instant it was scheduled, kept to
// find the tail's causes in a server trace (--server-trace).
type slowSample struct {
	at time.Time
	d  time.Duration
}

// keepSlow is how many of the slowest samples noteSlow keeps.
const keepSlow = 20

// noteSlow keeps (at, d) if it is among the keepSlow slowest so far.
func (t *tally) noteSlow(at time.Time, d time.Duration) {
	if len(t.slow) == keepSlow && d <= t.slow[len(t.slow)-1].d {
		return
	}
	i := sort.Search(len(t.slow), func(i int) bool { return t.slow[i].d < d })
	t.slow = slices.Insert(t.slow, i, slowSample{at, d})
	if len(t.slow) > keepSlow {
		t.slow = t.slow[:keepSlow]
	}
}

// maxLatency bounds the histogram; the client times out well before it.
const maxLatency = time.Minute

func newTally() *tally {
	return &tally{hist: hdrhistogram.New(1, int64(maxLatency/time.Microsecond), 3)}
}

func (t *tally) add(ok bool, reason string, d time.Duration) {
	t.n++
	if !ok {
		t.bad++
		if len(t.first) < 3 {
			t.first = append(t.first, reason)
		}
	}
	_ = t.hist.RecordValue(min(max(1, d.Microseconds()), int64(maxLatency/time.Microsecond)))
}

func (t *tally) merge(o *tally) {
	t.n += o.n
	t.bad += o.bad
	t.hist.Merge(o.hist)
	for _, f := range o.first {
		if len(t.first) < 3 {
			t.first = append(t.first, f)
		}
	}
}

func (t *tally) result(workload, load string, elapsed time.Duration) Result {
	q := func(p float64) time.Duration { return time.Duration(t.hist.ValueAtQuantile(p)) * time.Microsecond }
	return Result{
		Workload: workload, Load: load, Requests: t.n, Errors: t.bad,
		PerSecond: float64(t.n-t.bad) / elapsed.Seconds(),
		P50:       q(50), P99: q(99), P999: q(99.9), Max: time.Duration(t.hist.Max()) * time.Microsecond,
		FirstErrors: t.first,
	}
}

// workerConn returns worker w's own connection, to node w mod the node
// count (so workers spread round-robin over the nodes), already open, so
// TLS handshakes are not measured.
func (b *runner) workerConn(ctx context.Context, w int) *conn {
	k := w % len(b.nodes)
	c := &conn{c: newClient(), base: b.nodes[k].base, node: k}
	_, _, _ = do(ctx, c.c, http.MethodGet, c.base+"/healthz", "", "", nil)
	return c
}

// closedLoop runs Concurrency workers, each with its own connection,
// sending back to back; the warm-up is not measured.
func (b *runner) closedLoop(ctx context.Context, workload string) (Result, error) {
	n := b.o.Concurrency
	tallies := make([]*tally, n)
	var wg, ready sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	var warmEnd, end time.Time // written before start is closed
	for w := range n {
		tallies[w] = newTally()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			ready.Done()
			<-start
			t := tallies[w]
			// Worker w owns devices w, w+n, w+2n, ... for property sets.
			per := max(1, b.o.Devices/n)
			for k := 0; ctx.Err() == nil; k++ {
				now := time.Now()
				if now.After(end) {
					return
				}
				dev := w + n*(k%per)
				if workload == "send" {
					dev = int(b.next.Add(1) % int64(b.o.Devices))
				}
				ok, reason := b.request(ctx, c, workload, dev)
				if now.After(warmEnd) && ctx.Err() == nil {
					t.add(ok, reason, time.Since(now))
				}
			}
		}()
	}
	ready.Wait()
	warmEnd = time.Now().Add(b.o.Warmup)
	end = warmEnd.Add(b.o.Duration)
	close(start)
	time.Sleep(time.Until(warmEnd))
	win := b.begin(ctx, workload)
	wg.Wait()
	total := newTally()
	for _, t := range tallies {
		total.merge(t)
	}
	r := total.result(workload, fmt.Sprintf("%d conns", n), b.o.Duration)
	return r, win.end(&r)
}

// openLoop issues requests of base on a fixed timetable at rate per
// second and times each from its scheduled instant, so a slow server
// cannot hide latency by slowing the load (no coordinated omission).
func (b *runner) openLoop(ctx context.Context, workload, base string, rate int) (Result, error) {
	type job struct {
		at  time.Time
		dev int
	}
	// A second of backlog before the scheduler itself blocks; the backlog
	// is timed from the schedule either way.
	jobs := make(chan job, min(rate, 100_000))
	n := b.o.LatencyConns
	tallies := make([]*tally, n)
	var wg, ready sync.WaitGroup
	ready.Add(n)
	for w := range n {
		tallies[w] = newTally()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			ready.Done()
			for j := range jobs {
				ok, reason := b.request(ctx, c, base, j.dev)
				if ctx.Err() == nil {
					tallies[w].add(ok, reason, time.Since(j.at))
				}
			}
		}()
	}
	ready.Wait()
	interval := time.Second / time.Duration(rate)
	count := int(b.o.Duration / interval)
	start := time.Now()
	win := b.begin(ctx, workload)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		dev := i % b.o.Devices
		if base == "send" {
			dev = int(b.next.Add(1) % int64(b.o.Devices))
		}
		jobs <- job{at: at, dev: dev}
	}
	close(jobs)
	wg.Wait()
	total := newTally()
	for _, t := range tallies {
		total.merge(t)
	}
	// Achieved rate over the schedule plus the drain of the last
	// requests: a server that keeps up shows the target rate.
	r := total.result(workload, fmt.Sprintf("%d/s", rate), max(time.Since(start), b.o.Duration))
	return r, win.end(&r)
}

// window is a measured interval: CPU use of the servers, the bench and
// the bench's redis-server across it and, with Options.ServerPprof, a CPU
// profile of each node over it.
type window struct {
	b                       *runner
	t0                      time.Time
	server0, bench0, redis0 float64
	profDone                chan error // one answer per node
}

func (b *runner) begin(ctx context.Context, workload string) *window {
	w := &window{b: b, t0: time.Now(), server0: b.serverCPU(ctx), bench0: selfCPU(), redis0: -1}
	if b.redisPID > 0 {
		w.redis0 = procCPU(b.redisPID)
	}
	if b.o.ServerPprof != "" {
		secs := int(math.Ceil(b.o.Duration.Seconds()))
		w.profDone = make(chan error, len(b.nodes))
		for k, n := range b.nodes {
			path := filepath.Join(b.o.ServerPprof, profileName(workload, k, len(b.nodes)))
			go func() {
				var trace error
				done := make(chan struct{})
				if b.o.ServerTrace {
					go func() {
						defer close(done)
						trace = b.fetch(ctx, n.base, "trace", secs, strings.TrimSuffix(path, ".pprof")+".trace")
					}()
				} else {
					close(done)
				}
				err := b.fetch(ctx, n.base, "profile", secs, path)
				<-done
				w.profDone <- errors.Join(err, trace)
			}()
		}
	}
	return w
}

// profileName is <workload>.pprof, or with several nodes
// <workload>.node<k>.pprof for node k (counted from 1).
func profileName(workload string, k, nodes int) string {
	if nodes == 1 {
		return workload + ".pprof"
	}
	return fmt.Sprintf("%s.node%d.pprof", workload, k+1)
}

func (w *window) end(r *Result) error {
	elapsed := time.Since(w.t0).Seconds()
	r.ServerCPU, r.BenchCPU, r.RedisCPU = -1, -1, -1
	if s := w.b.serverCPU(context.Background()); s >= 0 && w.server0 >= 0 {
		r.ServerCPU = (s - w.server0) / elapsed
	}
	if c := selfCPU(); c >= 0 && w.bench0 >= 0 {
		r.BenchCPU = (c - w.bench0) / elapsed
	}
	if w.redis0 >= 0 {
		if c := procCPU(w.b.redisPID); c >= 0 {
			r.RedisCPU = (c - w.redis0) / elapsed
		}
	}
	if w.profDone != nil {
		var errs []error
		for range w.b.nodes {
			errs = append(errs, <-w.profDone)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("server profile: %w", err)
		}
	}
	return nil
}

// fetch saves the node's /debug/pprof/<what> (profile: CPU profile;
// trace: runtime trace) covering the next secs seconds.
func (b *runner) fetch(ctx context.Context, base, what string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	c := newClient()
	c.Timeout = 0 // bounded by ctx: the profile takes secs to arrive
	defer c.CloseIdleConnections()
	st, body, err := do(ctx, c, http.MethodGet, base+"/debug/pprof/"+what+"?seconds="+strconv.Itoa(secs), b.o.AdminUser, b.o.AdminPassword, nil)
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("get %s/debug/pprof/%s: %s", base, what, failure(st, body, err))
	}
	return os.WriteFile(path, body, 0o644)
}
