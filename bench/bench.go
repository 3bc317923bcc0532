// Package bench is `devmsg bench`: it starts a devmsg server (or uses a
// running one), drives the REST API over keep-alive HTTPS connections and
// reports throughput and latency percentiles for BENCHMARKS.md.
package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Options configures a run.
type Options struct {
	// Target is the base URL of a running server; empty starts one from
	// Binary in a temporary data dir.
	Target        string
	AdminUser     string
	AdminPassword string
	Binary        string

	Devices     int
	Concurrency int
	Duration    time.Duration
	Warmup      time.Duration
	// Rate is the open-loop rate in requests/s; 0 uses half of the
	// closed-loop throughput measured for the same endpoint in this run.
	Rate      int
	Workloads []string
	Markdown  bool
}

// Result is one workload's measurement.
type Result struct {
	Workload    string
	Load        string // "64 conns" or "5000/s"
	Requests    int64
	Errors      int64
	PerSecond   float64
	P50, P99    time.Duration
	P999, Max   time.Duration
	FirstErrors []string
}

// Run executes the workloads and writes the report to out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Devices < o.Concurrency {
		return fmt.Errorf("need at least as many devices (%d) as connections (%d)", o.Devices, o.Concurrency)
	}
	target, adminUser, adminPass := o.Target, o.AdminUser, o.AdminPassword
	if target == "" {
		srv, err := startServer(ctx, o.Binary)
		if err != nil {
			return err
		}
		defer srv.stop()
		target, adminUser, adminPass = srv.base, "admin", srv.adminPassword
	}
	c := newClient()
	app, err := setup(ctx, c, target, adminUser, adminPass, o.Devices)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	b := &runner{o: o, target: target, app: app, seqBase: rand.Int64N(1 << 40), versions: make([]deviceVersion, o.Devices)}
	for i := range b.versions {
		b.versions[i].v = 1
	}
	fmt.Fprintln(out, header())
	var results []Result
	closed := map[string]float64{}
	for _, w := range o.Workloads {
		var r Result
		switch w {
		case "send", "property":
			r = b.closedLoop(ctx, w)
			closed[w] = r.PerSecond
		case "send-latency", "property-latency":
			base := strings.TrimSuffix(w, "-latency")
			rate := o.Rate
			if rate == 0 {
				rate = int(closed[base] / 2)
				if rate == 0 {
					rate = 5000
				}
			}
			r = b.openLoop(ctx, base, rate)
			r.Workload = w
		default:
			return fmt.Errorf("unknown workload %q (want send, property, send-latency, property-latency)", w)
		}
		results = append(results, r)
		fmt.Fprintln(out, r.text())
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.Markdown {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "| workload | load | requests/s | p50 | p99 | p99.9 | max | errors |")
		fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
		for _, r := range results {
			fmt.Fprintf(out, "| %s | %s | %.0f | %s | %s | %s | %s | %d |\n", r.Workload, r.Load, r.PerSecond, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max), r.Errors)
		}
	}
	for _, r := range results {
		if r.Errors > 0 {
			return fmt.Errorf("%s: %d requests failed, first: %s", r.Workload, r.Errors, strings.Join(r.FirstErrors, "; "))
		}
	}
	return nil
}

func (r Result) text() string {
	return fmt.Sprintf("%-17s %-10s %8.0f req/s  p50 %-8s p99 %-8s p99.9 %-8s max %-8s errors %d",
		r.Workload, r.Load, r.PerSecond, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max), r.Errors)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// header describes the machine, so numbers are read against it.
func header() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = " kernel " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("devmsg bench %s: %d CPUs (%s), %s/%s%s, %s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, kernel, runtime.Version())
}

// newClient returns a client with one keep-alive HTTP/1.1 connection;
// each worker has its own, so connections equal workers.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			// The bench talks to its own server or one the user names;
			// a self-signed certificate is expected.
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
			ForceAttemptHTTP2:   false,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		},
	}
}

type appCreds struct{ key, secret string }

func do(ctx context.Context, c *http.Client, method, url, user, pass string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// setup creates an app with unlimited rates and its devices.
func setup(ctx context.Context, c *http.Client, target, user, pass string, devices int) (appCreds, error) {
	st, b, err := do(ctx, c, "POST", target+"/admin/v1/apps", user, pass, []byte(`{"name":"bench"}`))
	if err != nil || st != 200 {
		return appCreds{}, fmt.Errorf("create app: %d %s %v", st, b, err)
	}
	var created struct{ Key, MasterSecret string }
	var raw map[string]string
	if err := json.Unmarshal(b, &raw); err != nil {
		return appCreds{}, err
	}
	created.Key, created.MasterSecret = raw["key"], raw["master_secret"]
	st, b, err = do(ctx, c, "PUT", target+"/admin/v1/apps/"+created.Key+"/ratelimits", user, pass,
		[]byte(`{"create":0,"property":0,"message":0,"query":0}`))
	if err != nil || st != 200 {
		return appCreds{}, fmt.Errorf("set rate limits: %d %s %v", st, b, err)
	}
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
		st, b, err = do(ctx, c, "POST", target+"/device/v1/devices", created.Key, created.MasterSecret, []byte(sb.String()))
		if err != nil || st != 200 || bytes.Contains(b, []byte(`"code":3`)) {
			return appCreds{}, fmt.Errorf("create devices: %d %.200s %v", st, b, err)
		}
	}
	return appCreds{created.Key, created.MasterSecret}, nil
}

func deviceName(i int) string { return fmt.Sprintf("bench-%06d", i) }

type deviceVersion struct {
	mu sync.Mutex
	v  int64
}

type runner struct {
	o        Options
	target   string
	app      appCreds
	seqBase  int64
	seq      atomic.Int64
	next     atomic.Int64 // round-robin device for sends
	versions []deviceVersion
}

// request performs one request of the workload for device i and reports
// whether it succeeded, with a reason when it did not.
func (b *runner) request(ctx context.Context, c *http.Client, workload string, i int) (bool, string) {
	seq := b.seqBase + b.seq.Add(1)
	switch workload {
	case "send":
		body := fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"bench message %d","ttl":3600}`, seq, deviceName(i), seq)
		st, resp, err := do(ctx, c, "POST", b.target+"/msg/v1/msg", b.app.key, b.app.secret, []byte(body))
		if err != nil || st != 200 {
			return false, fmt.Sprintf("%d %.120s %v", st, resp, err)
		}
		return true, ""
	default: // property: every request is a real write at the device's current version
		dv := &b.versions[i]
		dv.mu.Lock()
		defer dv.mu.Unlock()
		body := fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"version":%d,"properties":[{"name":"setpoint","value":%d},{"name":"mode","value":"eco"}]}`,
			seq, deviceName(i), dv.v, seq%100)
		st, resp, err := do(ctx, c, "POST", b.target+"/device/v1/property", b.app.key, b.app.secret, []byte(body))
		if err != nil || st != 200 || !bytes.Contains(resp, []byte(`"op_code":0`)) {
			return false, fmt.Sprintf("%d %.120s %v", st, resp, err)
		}
		dv.v++
		return true, ""
	}
}

// tally accumulates one workload's outcomes.
type tally struct {
	mu     sync.Mutex
	hist   *hdrhistogram.Histogram
	n, bad int64
	first  []string
}

func newTally() *tally {
	return &tally{hist: hdrhistogram.New(1, int64(60*time.Second/time.Microsecond), 3)}
}

func (t *tally) add(ok bool, reason string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	if !ok {
		t.bad++
		if len(t.first) < 3 {
			t.first = append(t.first, reason)
		}
	}
	_ = t.hist.RecordValue(max(1, d.Microseconds()))
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

// closedLoop runs Concurrency workers, each with its own connection,
// sending back to back; the warm-up is not measured.
func (b *runner) closedLoop(ctx context.Context, workload string) Result {
	n := b.o.Concurrency
	t := newTally()
	start := time.Now()
	warmEnd := start.Add(b.o.Warmup)
	end := warmEnd.Add(b.o.Duration)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := newClient()
			for k := 0; ctx.Err() == nil; k++ {
				now := time.Now()
				if now.After(end) {
					return
				}
				var dev int
				if workload == "send" {
					dev = int(b.next.Add(1) % int64(b.o.Devices))
				} else {
					// Worker w owns devices w, w+n, w+2n, ...: no version races.
					per := b.o.Devices / n
					dev = w + n*(k%per)
				}
				ok, reason := b.request(ctx, c, workload, dev)
				if now.After(warmEnd) {
					t.add(ok, reason, time.Since(now))
				}
			}
		}(w)
	}
	wg.Wait()
	return t.result(workload, fmt.Sprintf("%d conns", n), b.o.Duration)
}

// openLoop issues requests on a fixed timetable at rate per second and
// measures each from its scheduled time, so a slow server cannot hide
// latency by slowing the load (no coordinated omission).
func (b *runner) openLoop(ctx context.Context, workload string, rate int) Result {
	t := newTally()
	type job struct {
		at  time.Time
		dev int
	}
	jobs := make(chan job, rate) // a full second of backlog before the scheduler itself lags
	const workers = 128
	var wg, ready sync.WaitGroup
	ready.Add(workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient()
			// Open the connection (TLS handshake) before the timetable starts.
			_, _, _ = do(ctx, c, "GET", b.target+"/healthz", "", "", nil)
			ready.Done()
			for j := range jobs {
				ok, reason := b.request(ctx, c, workload, j.dev)
				t.add(ok, reason, time.Since(j.at))
			}
		}()
	}
	ready.Wait()
	interval := time.Second / time.Duration(rate)
	total := int(b.o.Duration / interval)
	start := time.Now().Add(50 * time.Millisecond)
	for i := 0; i < total && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{at: at, dev: i % b.o.Devices}
	}
	close(jobs)
	wg.Wait()
	return t.result(workload, fmt.Sprintf("%d/s", rate), time.Since(start))
}

// server is a devmsg serve child process on a free loopback port.
type server struct {
	cmd           *exec.Cmd
	dir           string
	base          string
	adminPassword string
}

func startServer(ctx context.Context, binary string) (*server, error) {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		binary = exe
	}
	dir, err := os.MkdirTemp("", "devmsg-bench-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &server{dir: dir, base: "https://" + addr, adminPassword: fmt.Sprintf("bench-%d", rand.Int64())}
	s.cmd = exec.Command(binary, "serve")
	s.cmd.Env = append(os.Environ(),
		"DEVMSG_DATA_DIR="+dir, "DEVMSG_HTTP_ADDR="+addr, "DEVMSG_ADMIN_PASSWORD="+s.adminPassword,
		"DEVMSG_LOG_LEVEL=warn", "DEVMSG_MQTT_TCP_ADDR=", "DEVMSG_MQTT_TLS_ADDR=", "DEVMSG_MQTT_WS_ADDR=")
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	c := newClient()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, err := do(ctx, c, "GET", s.base+"/healthz", "", "", nil)
		if err == nil && st == 200 {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, errors.Join(errors.New("server did not become healthy within 30s"), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}
