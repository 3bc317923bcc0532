package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Workloads lists every workload in its default order: each latency run
// follows the closed loop whose throughput sets its default rate.
var Workloads = []string{"send", "property", "send-latency", "property-latency"}

// MaxPendingPerDevice is the server's per-device queue bound (docs/api.md,
// "Errors": 3004, device queue full): sends past it still answer 200 but
// are stored as failed, a different code path from a real enqueue.
const MaxPendingPerDevice = 1000

// Options configures a run. Zero values are not defaults: the command
// line sets those.
type Options struct {
	// Target is the base URL of a running server, e.g.
	// https://127.0.0.1:8443. Empty starts `Binary serve` in a temporary
	// data dir and stops it at the end.
	Target string
	// AdminUser and AdminPassword are the admin account of Target.
	AdminUser     string
	AdminPassword string
	// Binary is the devmsg executable to start; empty means this one.
	Binary string

	Devices int
	// Concurrency is the number of connections of the closed loops.
	Concurrency int
	// Duration is the measured time of each workload; closed loops run
	// Warmup longer and discard it.
	Duration time.Duration
	Warmup   time.Duration
	// Rate is the open-loop rate in requests/s; 0 uses half of the
	// closed-loop throughput measured for the same endpoint in this run,
	// or DefaultRate when that did not run.
	Rate int
	// LatencyConns is the connection pool of the open loops; it must
	// cover rate × latency or requests queue in the client (still timed
	// from their schedule, so the numbers stay honest, only worse).
	LatencyConns int
	Workloads    []string
	// Markdown adds a table to paste into BENCHMARKS.md.
	Markdown bool
	// Subscribers is the number of devices connected for deliver-latency,
	// deliver and their Mosquitto counterparts; IdleDevices the number for
	// idle-memory. MQTTAddr is the MQTT TCP address of Target (with
	// --target; the bench knows it for a server it starts).
	Subscribers int
	IdleDevices int
	// ServerTrace adds a runtime trace of each node over each workload to
	// ServerPprof (<workload>.trace, or <workload>.node<k>.trace).
	ServerTrace bool
	// ChurnCycles is how many connect/subscribe/disconnect cycles churn runs.
	ChurnCycles int
	// Timeline, when not 0, has fanout print to Log, at this interval,
	// the messages sent and received so far beside the server's
	// published and delivered counts: where a run falls behind, and
	// whether the devices or the server's PUBACK writes hold it. With
	// any value, job prints each job's progress at every poll.
	Timeline time.Duration
	// Log receives the timeline; nil is os.Stderr.
	Log      io.Writer
	MQTTAddr string
	// ServerPprof, when set, is a directory that receives a CPU profile
	// of the server for each workload's measured window
	// (<workload>.pprof, or <workload>.node<k>.pprof for node k of
	// several), fetched from its admin-only /debug/pprof.
	ServerPprof string

	// Store is the store of the servers the bench starts: StoreEmbedded
	// (Pebble in each server's data dir) or StoreRedis (a redis-server the
	// bench starts on a loopback port, persisting through its append-only
	// file with appendfsync RedisFsync, "always" or "everysec").
	Store      string
	RedisFsync string
	// Nodes is how many servers the bench starts on one Redis store, with
	// node IDs 1 to Nodes. Setup goes through node 1; REST workers and
	// MQTT devices spread round-robin over the nodes, and the delivery
	// workloads send to each device through a node other than the one it
	// is connected to.
	Nodes int
}

// The stores of Options.Store.
const (
	StoreEmbedded = "embedded"
	StoreRedis    = "redis"
)

// RedisFsyncModes are the appendfsync settings Options.RedisFsync takes.
var RedisFsyncModes = []string{"always", "everysec"}

func (o Options) hasDeviceWorkloads() bool {
	return slices.ContainsFunc(o.Workloads, func(w string) bool {
		return slices.Contains(DeviceWorkloads, w) || w == "callback-lag" || slices.Contains(EventWorkloads, w) || w == "fanout" ||
			slices.Contains(CommandWorkloads, w) || slices.Contains(JobWorkloads, w)
	})
}

// deviceCount is how many devices setup creates.
func (o Options) deviceCount() int {
	if slices.Contains(o.Workloads, "idle-memory") {
		return max(o.Devices, o.IdleDevices)
	}
	return o.Devices
}

// DefaultRate is the open-loop rate when neither Options.Rate nor a
// closed-loop measurement gives one.
const DefaultRate = 5000

func (o Options) validate() error {
	errs := slices.Concat(o.validateLoad(), o.validateWorkloads(), o.validateDeployment())
	return errors.Join(errs...)
}

// validateLoad checks the sizes of the load: connections, devices, rates
// and durations.
func (o Options) validateLoad() []error {
	var errs []error
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: need at least 1", o.Concurrency))
	}
	if o.Devices < 1 || o.Devices > 999_999 {
		errs = append(errs, fmt.Errorf("devices %d: need 1 to 999999", o.Devices))
	}
	if slices.Contains(o.Workloads, "property") && o.Devices < o.Concurrency {
		// Each property worker owns its own devices, so versions never race.
		errs = append(errs, fmt.Errorf("property needs at least as many devices (%d) as connections (%d)", o.Devices, o.Concurrency))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %s: must be positive", o.Duration))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup %s: must not be negative", o.Warmup))
	}
	if o.Rate < 0 || o.Rate > 1_000_000 {
		errs = append(errs, fmt.Errorf("rate %d: need 0 (automatic) to 1000000", o.Rate))
	}
	if o.LatencyConns < 1 {
		errs = append(errs, fmt.Errorf("latency connections %d: need at least 1", o.LatencyConns))
	}
	return errs
}

// validateWorkloads checks the workload names and what each named
// workload needs of the other options.
func (o Options) validateWorkloads() []error {
	return slices.Concat(o.validateWorkloadNames(), o.validateDevices(), o.validateOwnServer(), o.validateServerAccess())
}

// allWorkloads lists every workload name the bench knows.
func allWorkloads() []string {
	return slices.Concat(Workloads, DeviceWorkloads, CallbackWorkloads, EventWorkloads, FleetWorkloads, CommandWorkloads, JobWorkloads, DiskWorkloads)
}

// validateWorkloadNames checks that at least one workload is named and
// that the bench knows every name.
func (o Options) validateWorkloadNames() []error {
	var errs []error
	if len(o.Workloads) == 0 {
		errs = append(errs, errors.New("no workloads"))
	}
	known := allWorkloads()
	for _, w := range o.Workloads {
		if !slices.Contains(known, w) {
			errs = append(errs, fmt.Errorf("unknown workload %q (want %s)", w, strings.Join(known, ", ")))
		}
	}
	return errs
}

// validateDevices checks the connected devices of the workloads that
// drive devices: enough of them, and for telemetry few enough
// publishes per device.
func (o Options) validateDevices() []error {
	var errs []error
	if o.hasDeviceWorkloads() && (o.Subscribers < 1 || o.Subscribers > o.Devices) {
		errs = append(errs, fmt.Errorf("subscribers %d: need 1 to --devices (%d)", o.Subscribers, o.Devices))
	}
	if slices.Contains(o.Workloads, "telemetry") && o.Subscribers > 0 {
		rate := o.Rate
		if rate == 0 {
			rate = DefaultRate
		}
		if perDevice := (rate + o.Subscribers - 1) / o.Subscribers; perDevice > telemetryDeviceRate {
			errs = append(errs, fmt.Errorf("telemetry at %d/s over %d devices is %d/s per device, over the %d/s a bench device publishes (the server refuses a device more than 50/s): use more --subscribers",
				rate, o.Subscribers, perDevice, telemetryDeviceRate))
		}
	}
	return errs
}

// validateOwnServer checks the workloads that read the server process's
// memory, so need a server the bench starts itself.
func (o Options) validateOwnServer() []error {
	var errs []error
	if slices.Contains(o.Workloads, "idle-memory") && o.Target != "" {
		errs = append(errs, errors.New("idle-memory reads the server's RSS, so it needs a server the bench starts (no --target)"))
	}
	if slices.Contains(o.Workloads, "churn") && o.Target != "" {
		errs = append(errs, errors.New("churn reads the server's RSS, so it needs a server the bench starts (no --target)"))
	}
	if slices.Contains(o.Workloads, "churn") && o.ChurnCycles < 1 {
		errs = append(errs, fmt.Errorf("churn cycles %d: need at least 1", o.ChurnCycles))
	}
	return errs
}

// validateServerAccess checks the options that reach into the server:
// its trace needs its pprof directory, and a server the bench did not
// start needs its admin password.
func (o Options) validateServerAccess() []error {
	var errs []error
	if o.ServerTrace && o.ServerPprof == "" {
		errs = append(errs, errors.New("--server-trace needs --server-pprof, the directory it writes to"))
	}
	if o.Target != "" && o.AdminPassword == "" {
		errs = append(errs, errors.New("--target needs --admin-password"))
	}
	return errs
}

// validateDeployment checks the store and node options.
func (o Options) validateDeployment() []error {
	var errs []error
	switch o.Store {
	case StoreEmbedded:
	case StoreRedis:
		if o.Target != "" {
			errs = append(errs, errors.New("--store redis starts its own redis-server and servers; with --target the store is the target's"))
		}
	default:
		errs = append(errs, fmt.Errorf("store %q: want %s or %s", o.Store, StoreEmbedded, StoreRedis))
	}
	if !slices.Contains(RedisFsyncModes, o.RedisFsync) {
		errs = append(errs, fmt.Errorf("redis fsync %q: want %s", o.RedisFsync, strings.Join(RedisFsyncModes, " or ")))
	}
	if o.Nodes < 1 || o.Nodes > 64 {
		errs = append(errs, fmt.Errorf("nodes %d: need 1 to 64", o.Nodes))
	}
	if o.Nodes <= 1 {
		return errs
	}
	if o.Store != StoreRedis {
		errs = append(errs, fmt.Errorf("--nodes %d: several nodes share one store, so they need --store redis", o.Nodes))
	}
	if o.Target != "" {
		errs = append(errs, fmt.Errorf("--nodes %d: the bench starts the nodes, so it takes no --target", o.Nodes))
	}
	if slices.Contains(o.Workloads, "idle-memory") {
		errs = append(errs, fmt.Errorf("--nodes %d: idle-memory reads the RSS of one server process; run it with --nodes 1", o.Nodes))
	}
	if slices.Contains(o.Workloads, "churn") {
		errs = append(errs, fmt.Errorf("--nodes %d: churn reads the RSS of one server process; run it with --nodes 1", o.Nodes))
	}
	if slices.Contains(o.Workloads, "mosquitto") {
		errs = append(errs, fmt.Errorf("--nodes %d: mosquitto compares one broker with Mosquitto; run it with --nodes 1", o.Nodes))
	}
	// Every node gets a worker of each pool and, in the delivery
	// workloads, devices to send to.
	if o.Concurrency < o.Nodes {
		errs = append(errs, fmt.Errorf("concurrency %d: need at least one connection per node (%d)", o.Concurrency, o.Nodes))
	}
	if o.LatencyConns < o.Nodes {
		errs = append(errs, fmt.Errorf("latency connections %d: need at least one per node (%d)", o.LatencyConns, o.Nodes))
	}
	if o.hasDeviceWorkloads() && o.Subscribers < o.Nodes {
		errs = append(errs, fmt.Errorf("subscribers %d: need at least one per node (%d)", o.Subscribers, o.Nodes))
	}
	return errs
}

// Result is one workload's measurement.
type Result struct {
	Workload string
	Load     string // "64 conns" or "5000/s"
	// Requests counts every measured request, Errors the failed ones;
	// PerSecond counts successes only.
	Requests  int64
	Errors    int64
	PerSecond float64
	P50, P99  time.Duration
	P999, Max time.Duration
	// ServerCPU and BenchCPU are the cores each process kept busy during
	// the measured window (negative when unknown); on a small machine
	// they show which side ran out. ServerCPU adds up every node's.
	// RedisCPU is the cores of the redis-server the bench started,
	// negative when unknown or there is none.
	ServerCPU, BenchCPU, RedisCPU float64
	FirstErrors                   []string
	// slow holds the slowest samples of a delivery workload, printed with
	// --server-trace to look them up in the trace.
	slow []slowSample
}

// Run sets up, executes o.Workloads in order and writes the report to out.
// It returns an error if setup failed or any measured request failed; the
// report is written either way.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.ServerPprof != "" {
		if err := os.MkdirAll(o.ServerPprof, 0o755); err != nil {
			return err
		}
	}
	o.Target = strings.TrimRight(o.Target, "/")
	exe, err := benchBinary(o)
	if err != nil {
		return err
	}
	b := &runner{o: o, seqBase: rand.Int64N(1 << 40), exe: exe, nodes: []node{{base: o.Target, mqtt: o.MQTTAddr}}}
	deployed := "store and nodes of the target"
	if o.Target == "" {
		d, err := startDeployment(ctx, o)
		if err != nil {
			return err
		}
		defer d.stop()
		deployed = d.describe()
		b.nodes, b.serverPID, b.redisPID = d.nodes(), d.servers[0].cmd.Process.Pid, d.redisPID()
		b.o.AdminUser, b.o.AdminPassword = "admin", d.adminPassword
	}
	b.target = b.nodes[0].base
	if err := b.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		if b.cb != nil {
			b.cb.close()
		}
	}()
	machine := header()
	fmt.Fprintln(out, machine)
	fmt.Fprintf(out, "target %s; %s; %d devices, %s per workload\n", b.target, deployed, o.Devices, o.Duration)
	if len(b.nodes) > 1 {
		fmt.Fprintf(out, "nodes %s; server CPU is their sum; devices connect to node i mod %d, and delivery sends go through the next node (cross-node)\n",
			b.nodeList(), len(b.nodes))
	}
	results, err := b.runWorkloads(ctx, out)
	if err != nil {
		return err
	}
	if o.Markdown {
		fmt.Fprintln(out)
		fmt.Fprint(out, markdown(machine, deployed, o, results))
	}
	return failedRequests(results)
}

// benchBinary is the devmsg binary the bench-client processes run:
// Options.Binary, else the running executable.
func benchBinary(o Options) (string, error) {
	if o.Binary != "" {
		return o.Binary, nil
	}
	return os.Executable()
}

// busyWarning is printed when the server did not go idle between two
// workloads.
const busyWarning = "warning: the server was still busy after the previous workload; measuring anyway"

// runWorkloads runs b.o.Workloads in order, printing each result as it
// comes, and returns the results for the report. Between workloads it
// waits for the server to go idle, so one workload's backlog does not
// weigh on the next.
func (b *runner) runWorkloads(ctx context.Context, out io.Writer) ([]Result, error) {
	var results []Result
	var devmsg brokerRun // device workloads' numbers, for the Mosquitto comparison
	closed := map[string]float64{}
	for i, w := range b.o.Workloads {
		if i > 0 {
			if idle := b.settle(ctx); !idle {
				fmt.Fprintln(out, busyWarning)
			}
		}
		switch w {
		case "idle-memory":
			perDevice, err := b.idleMemoryDevmsg(ctx, out)
			if err != nil {
				return nil, err
			}
			devmsg.perDevice, devmsg.idleMeasured = perDevice, true
			continue
		case "churn":
			if err := b.churnDevmsg(ctx, out); err != nil {
				return nil, err
			}
			continue
		case "telemetry":
			rs, err := b.telemetry(ctx, out)
			if err != nil {
				return nil, fmt.Errorf("telemetry: %w", err)
			}
			results = append(results, rs...)
			continue
		case "command-latency", "command-batch":
			rs, err := b.commands(ctx, w, out)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w, err)
			}
			results = append(results, rs...)
			continue
		case "job":
			rs, err := b.jobs(ctx, out)
			if err != nil {
				return nil, fmt.Errorf("job: %w", err)
			}
			results = append(results, rs...)
			continue
		case "mosquitto":
			rs, err := b.compareMosquitto(ctx, out, devmsg)
			if err != nil {
				return nil, fmt.Errorf("mosquitto: %w", err)
			}
			results = append(results, rs...)
			continue
		}
		r, err := b.measure(ctx, w, out, &devmsg, closed)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		fmt.Fprintln(out, r.text())
		if b.o.ServerTrace && len(r.slow) > 0 {
			fmt.Fprintf(out, "%s: slowest (scheduled at, latency):", w)
			for _, s := range r.slow {
				fmt.Fprintf(out, " %s %s;", s.at.UTC().Format("15:04:05.000"), ms(s.d))
			}
			fmt.Fprintln(out)
		}
		b.warnQueueFull(w, out)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return results, nil
}

// measure runs workload w, one that yields a single Result. The delivery
// workloads' results go to devmsg, for the Mosquitto comparison; the
// closed loops' rates go to closed, where the open loops that follow
// take half of them as their rate.
func (b *runner) measure(ctx context.Context, w string, out io.Writer, devmsg *brokerRun, closed map[string]float64) (Result, error) {
	var r Result
	var err error
	switch w {
	case "deliver-latency":
		r, err = b.deliverDevmsg(ctx, w, b.deliverRate())
		devmsg.latency = &r
	case "deliver":
		r, err = b.deliverDevmsg(ctx, w, 0)
		devmsg.deliver = &r
	case "fanout":
		r, err = b.fanoutDevmsg(ctx, w)
		devmsg.fanout = &r
	case "broadcast":
		r, err = b.broadcastDevmsg(ctx, w)
	case "disk":
		r, err = b.disk(ctx, w, out)
	case "callback-lag":
		r, err = b.callbackLag(ctx, w, b.deliverRate())
	case "callback":
		r, err = b.callbackDrain(ctx, w, out)
	case "send", "property":
		r, err = b.closedLoop(ctx, w)
		closed[w] = r.PerSecond
	default:
		base := strings.TrimSuffix(w, "-latency")
		r, err = b.openLoop(ctx, w, base, b.openLoopRate(base, closed))
	}
	return r, err
}

// openLoopRate is the rate of the open loop on base: Options.Rate, else
// half the closed loop's measured rate, else DefaultRate.
func (b *runner) openLoopRate(base string, closed map[string]float64) int {
	rate := b.o.Rate
	if rate == 0 {
		rate = int(closed[base] / 2)
	}
	if rate == 0 {
		rate = DefaultRate
	}
	return rate
}

// idleMemoryDevmsg measures the first server's RSS per idle device
// connected to it.
func (b *runner) idleMemoryDevmsg(ctx context.Context, out io.Writer) (float64, error) {
	creds := make([]string, b.o.IdleDevices)
	for i := range creds {
		user := b.key + "/" + deviceName(i)
		creds[i] = user + "," + b.secrets[i] + ",d/" + user + "/msg"
	}
	return idleMemory(ctx, b.exe, b.serverPID, b.nodes[0].mqtt, creds, out, "devmsg", b.gcSnapshot)
}

// warnQueueFull warns, once per run, when a send workload has sent more
// than the devices' queues hold, so the sends past it were stored as
// failed rather than enqueued.
func (b *runner) warnQueueFull(w string, out io.Writer) {
	if sent := b.sent.Load(); strings.HasPrefix(w, "send") && sent > int64(b.o.Devices)*MaxPendingPerDevice && !b.warned {
		b.warned = true
		fmt.Fprintf(out, "warning: %d sends to %d devices is over %d per device; those past it were stored as failed (queue full), not enqueued; use more --devices\n",
			sent, b.o.Devices, MaxPendingPerDevice)
	}
}

// failedRequests reports every workload that had failed requests, with
// its first errors.
func failedRequests(results []Result) error {
	var errs []error
	for _, r := range results {
		if r.Errors > 0 {
			errs = append(errs, fmt.Errorf("%s: %d of %d requests failed, first: %s", r.Workload, r.Errors, r.Requests, strings.Join(r.FirstErrors, "; ")))
		}
	}
	return errors.Join(errs...)
}

func (r Result) text() string {
	s := fmt.Sprintf("%-16s %-9s %7.0f req/s (%d requests)  p50 %s  p99 %s  p99.9 %s  max %s  errors %d  cpu: server %s, bench %s",
		r.Workload, r.Load, r.PerSecond, r.Requests, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max), r.Errors, cores(r.ServerCPU), cores(r.BenchCPU))
	if r.RedisCPU >= 0 {
		s += ", redis " + cores(r.RedisCPU)
	}
	return s
}

// markdown renders the results as a table for BENCHMARKS.md, with the
// machine and settings they hold only for; deployed names the store and
// nodes. A run on a Redis the bench started gets a column of its CPU.
func markdown(machine, deployed string, o Options, results []Result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s; %s; %d devices, %s measured per workload (closed loops after %s warm-up)\n\n",
		machine, deployed, o.Devices, o.Duration, o.Warmup)
	redis := o.Store == StoreRedis && o.Target == ""
	if redis {
		sb.WriteString("| workload | concurrency / rate | requests/s | p50 | p99 | p99.9 | max | errors | server CPU | bench CPU | redis CPU |\n")
		sb.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	} else {
		sb.WriteString("| workload | concurrency / rate | requests/s | p50 | p99 | p99.9 | max | errors | server CPU | bench CPU |\n")
		sb.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	}
	for _, r := range results {
		fmt.Fprintf(&sb, "| %s | %s | %.0f | %s | %s | %s | %s | %d | %s | %s |",
			r.Workload, r.Load, r.PerSecond, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max), r.Errors, cores(r.ServerCPU), cores(r.BenchCPU))
		if redis {
			fmt.Fprintf(&sb, " %s |", cores(r.RedisCPU))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func cores(c float64) string {
	if c < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f cores", c)
}

// header describes the machine, so numbers are read against it.
func header() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := exec.Command("uname", "-r").Output(); err == nil {
		kernel = " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("devmsg bench %s: %d CPUs (%s), %s/%s%s, %s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, kernel, runtime.Version())
}
