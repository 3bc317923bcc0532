package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func small() Options {
	return Options{
		Devices: 20, Concurrency: 4, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Rate: 200, LatencyConns: 8, Workloads: Workloads, Markdown: true,
		Store: StoreEmbedded, RedisFsync: "everysec", Nodes: 1,
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   string // "" means valid
	}{
		{"small", func(*Options) {}, ""},
		{"unknown workload", func(o *Options) { o.Workloads = []string{"send", "query"} }, `unknown workload "query"`},
		{"no workloads", func(o *Options) { o.Workloads = nil }, "no workloads"},
		{"fewer devices than property workers", func(o *Options) { o.Devices = 3 }, "property needs at least"},
		{"fewer devices fine for sends", func(o *Options) { o.Devices, o.Workloads = 3, []string{"send"} }, ""},
		{"zero duration", func(o *Options) { o.Duration = 0 }, "duration"},
		{"negative rate", func(o *Options) { o.Rate = -1 }, "rate"},
		{"target without password", func(o *Options) { o.Target = "https://127.0.0.1:8443" }, "--admin-password"},
		{"redis", func(o *Options) { o.Store = StoreRedis }, ""},
		{"unknown store", func(o *Options) { o.Store = "sqlite" }, `store "sqlite"`},
		{"unknown fsync", func(o *Options) { o.Store, o.RedisFsync = StoreRedis, "no" }, `redis fsync "no"`},
		{"redis with target", func(o *Options) {
			o.Store, o.Target, o.AdminPassword = StoreRedis, "https://127.0.0.1:8443", "pw"
		}, "--store redis starts its own"},
		{"two nodes on redis", func(o *Options) { o.Store, o.Nodes = StoreRedis, 2 }, ""},
		{"zero nodes", func(o *Options) { o.Nodes = 0 }, "nodes 0"},
		{"two nodes embedded", func(o *Options) { o.Nodes = 2 }, "need --store redis"},
		{"two nodes with target", func(o *Options) {
			o.Store, o.Nodes, o.Target, o.AdminPassword = StoreRedis, 2, "https://127.0.0.1:8443", "pw"
		}, "takes no --target"},
		{"two nodes idle-memory", func(o *Options) {
			o.Store, o.Nodes, o.Subscribers, o.Workloads = StoreRedis, 2, 10, []string{"deliver", "idle-memory"}
		}, "idle-memory reads the RSS"},
		{"two nodes mosquitto", func(o *Options) {
			o.Store, o.Nodes, o.Subscribers, o.Workloads = StoreRedis, 2, 10, []string{"mosquitto"}
		}, "mosquitto compares one broker"},
		{"more nodes than subscribers", func(o *Options) {
			o.Store, o.Nodes, o.Subscribers, o.Workloads = StoreRedis, 3, 2, []string{"deliver"}
		}, "subscribers 2: need at least one per node"},
		{"more nodes than connections", func(o *Options) { o.Store, o.Nodes = StoreRedis, 5 }, "concurrency 4: need at least one connection per node"},
		{"telemetry", func(o *Options) { o.Subscribers, o.Workloads = 10, []string{"telemetry"} }, ""},
		{"job", func(o *Options) { o.Subscribers, o.Workloads = 10, []string{"job"} }, ""},
		{"job with more online devices than devices", func(o *Options) { o.Subscribers, o.Workloads = 30, []string{"job"} }, "subscribers 30"},
		{"telemetry over the per-device rate", func(o *Options) { o.Subscribers, o.Rate, o.Workloads = 10, 500, []string{"telemetry"} }, "50/s per device"},
		{"telemetry default rate", func(o *Options) { o.Rate, o.Subscribers, o.Workloads = 0, 20, []string{"telemetry"} }, "250/s per device"},
		{"telemetry with more publishers than devices", func(o *Options) { o.Subscribers, o.Workloads = 30, []string{"telemetry"} }, "subscribers 30"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := small()
			tc.change(&o)
			err := o.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// buildDevmsg builds the real binary once for the tests that run it.
func buildDevmsg(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the devmsg binary")
	}
	bin := filepath.Join(t.TempDir(), "devmsg")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/devmsg/devmsg/cmd/devmsg").CombinedOutput(); err != nil {
		t.Fatalf("build cmd/devmsg: %v\n%s", err, out)
	}
	return bin
}

// TestRun runs every workload briefly against a real server, one the
// bench starts and one it is pointed at; it checks the report, never the
// speed.
func TestRun(t *testing.T) {
	bin := buildDevmsg(t)
	check := func(t *testing.T, o Options) {
		t.Helper()
		var out bytes.Buffer
		if err := Run(context.Background(), o, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		report := out.String()
		for _, w := range o.Workloads {
			if !strings.Contains(report, "\n"+w+" ") || !strings.Contains(report, "| "+w+" |") {
				t.Errorf("report lacks workload %s:\n%s", w, report)
			}
		}
		for _, want := range []string{"devmsg bench ", "| workload |", "errors 0", "/s"} {
			if !strings.Contains(report, want) {
				t.Errorf("report lacks %q:\n%s", want, report)
			}
		}
		// "still busy" says the server had not gone idle between two
		// workloads, which on a loaded 2-core CI machine (the other
		// packages' tests run beside this one) is the machine, not the
		// bench; any other warning fails.
		rest := strings.ReplaceAll(report, busyWarning, "")
		if strings.Contains(rest, "warning") {
			t.Errorf("unexpected warning:\n%s", report)
		}
	}

	t.Run("self-started", func(t *testing.T) {
		o := small()
		o.Binary = bin
		o.ServerPprof = t.TempDir()
		check(t, o)
		for _, w := range Workloads {
			if fi, err := os.Stat(filepath.Join(o.ServerPprof, w+".pprof")); err != nil || fi.Size() == 0 {
				t.Errorf("no server profile for %s: %v", w, err)
			}
		}
	})

	t.Run("target", func(t *testing.T) {
		srv, err := startServer(context.Background(), serverSpec{binary: bin})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.stop()
		o := small()
		o.Target, o.AdminUser, o.AdminPassword = srv.base+"/", "admin", srv.adminPassword
		check(t, o)
		// A second run on the same server gets its own app and seq_no space.
		o.Workloads = []string{"property", "send"}
		check(t, o)
	})
}

// TestRunDevices runs the device workloads briefly against a server the
// bench starts, and Mosquitto when it is installed; it checks the
// report, never the speed.
func TestRunDevices(t *testing.T) {
	bin := buildDevmsg(t)
	o := small()
	o.Binary, o.Subscribers, o.IdleDevices = bin, 10, 60
	o.Workloads = []string{"deliver-latency", "deliver", "idle-memory"}
	_, err := exec.LookPath("mosquitto")
	if _, statErr := os.Stat("/usr/sbin/mosquitto"); err == nil || statErr == nil {
		o.Workloads = append(o.Workloads, "mosquitto")
	} else {
		t.Log("mosquitto not installed (Debian package mosquitto; CI installs it): comparison not run")
	}
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	want := []string{"\ndeliver-latency ", "\ndeliver ", "idle-memory      devmsg    60 devices", "KiB per device"}
	if slices.Contains(o.Workloads, "mosquitto") {
		want = append(want, "\nmosquitto-latency ", "\nmosquitto-deliver ", "idle-memory      mosquitto", "devmsg / mosquitto:", "memory per device")
	}
	for _, w := range want {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
}

// TestRunCallbacks runs the callback workloads briefly against a server
// the bench starts; it checks the report, never the speed.
func TestRunCallbacks(t *testing.T) {
	bin := buildDevmsg(t)
	o := small()
	o.Binary, o.Subscribers = bin, 10
	o.Workloads = CallbackWorkloads
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, w := range []string{"\ncallback-lag ", "receiver released", "\ncallback         backlog ", "errors 0"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
}

// TestRunRedis runs the REST workloads on two nodes sharing a Redis the
// bench starts, and deliver-latency on one node of it; it checks the
// report, never the speed. Cross-node delivery is not measured here.
func TestRunRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH (Debian package redis-server; CI installs it)")
	}
	bin := buildDevmsg(t)
	run := func(t *testing.T, o Options, want ...string) {
		t.Helper()
		var out bytes.Buffer
		if err := Run(context.Background(), o, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		for _, w := range append(want, "| redis CPU |", ", redis ", "errors 0") {
			if !strings.Contains(out.String(), w) {
				t.Errorf("report lacks %q:\n%s", w, out.String())
			}
		}
	}
	t.Run("two nodes", func(t *testing.T) {
		o := small()
		o.Binary, o.Store, o.Nodes, o.RedisFsync = bin, StoreRedis, 2, "always"
		o.Workloads = []string{"send", "property"}
		o.ServerPprof = t.TempDir()
		run(t, o, "appendfsync always); 2 nodes", "\nsend ", "\nproperty ")
		if fi, err := os.Stat(filepath.Join(o.ServerPprof, "send.node2.pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("no profile of node 2: %v", err)
		}
	})
	t.Run("one node", func(t *testing.T) {
		o := small()
		o.Binary, o.Store, o.Subscribers = bin, StoreRedis, 10
		o.Workloads = []string{"deliver-latency"}
		run(t, o, "appendfsync everysec); 1 node", "\ndeliver-latency ")
	})
}

// TestDevicePlacement checks that with several nodes every delivery send
// goes through a node other than its device's, and that each node's
// workers reach every device whose sends are theirs.
func TestDevicePlacement(t *testing.T) {
	for nodes := 1; nodes <= 4; nodes++ {
		for subs := nodes; subs <= 9; subs++ {
			t.Run(fmt.Sprintf("%d nodes %d devices", nodes, subs), func(t *testing.T) {
				b := &runner{nodes: make([]node, nodes), o: Options{Subscribers: subs}}
				reached := map[int]bool{}
				for n := range nodes {
					for k := range int64(2 * subs) {
						i := b.sendDevice(n, k)
						if i < 0 || i >= subs || b.sendNode(i) != n || (nodes > 1 && b.mqttNode(i) == n) {
							t.Fatalf("node %d, turn %d: device %d (MQTT node %d, send node %d)", n, k, i, b.mqttNode(i), b.sendNode(i))
						}
						reached[i] = true
					}
				}
				if len(reached) != subs {
					t.Errorf("reached %d of %d devices", len(reached), subs)
				}
			})
		}
	}
}

// TestRunTelemetry runs the telemetry workload briefly against a server
// the bench starts, with its webhook receiver, and Mosquitto when it is
// installed; it checks the report, never the speed.
func TestRunTelemetry(t *testing.T) {
	bin := buildDevmsg(t)
	o := small()
	o.Binary, o.Subscribers, o.Rate = bin, 10, 200
	o.Workloads = EventWorkloads
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	want := []string{"\ntelemetry ", "\ntelemetry-webhook ", "\ntelemetry-latency ", "\ntelemetry-puback ", "| telemetry-webhook |", "errors 0"}
	_, err := exec.LookPath("mosquitto")
	if _, statErr := os.Stat("/usr/sbin/mosquitto"); err == nil || statErr == nil {
		want = append(want, "\nmosquitto-telemetry ", "\nmosquitto-relay ", "\nmosquitto-relay-latency ", "devmsg / mosquitto:")
	}
	for _, w := range want {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
	if strings.Contains(report, "dup") {
		t.Errorf("duplicates delivered without a crash:\n%s", report)
	}
}

// TestArrivals checks the accounting of the receiving end: a repeat is
// counted once, as a duplicate, and a reading of an earlier phase is not
// this phase's.
func TestArrivals(t *testing.T) {
	a := newArrivals()
	a.begin(2)
	now := time.Now()
	at := now.Add(-5 * time.Millisecond).UnixNano()
	for _, r := range []struct {
		dev string
		seq int64
		run int
	}{{"a", 1, 2}, {"a", 2, 2}, {"b", 1, 2}, {"a", 1, 2}, {"a", 9, 1}} {
		a.arrive(r.dev, fmt.Appendf(nil, `{"temp":1,"seq":%d,"run":%d,"at_ns":%d}`, r.seq, r.run, at), now)
	}
	a.arrive("a", []byte("not json"), now)
	if n := a.count(); n != 3 || a.dups != 1 || a.stale != 1 {
		t.Fatalf("count %d, dups %d, stale %d; want 3, 1, 1", n, a.dups, a.stale)
	}
	if p50 := a.lat.result("x", "", time.Second).P50; p50 < 4*time.Millisecond || p50 > 6*time.Millisecond {
		t.Fatalf("latency p50 %s, want 5ms", p50)
	}
}

// TestDisk: the disk workload syncs at the rate for the duration and
// reports it, with no server.
func TestDisk(t *testing.T) {
	o := small()
	o.Rate, o.Duration = 500, 200*time.Millisecond
	b := &runner{o: o}
	var out bytes.Buffer
	r, err := b.disk(context.Background(), "disk", &out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests < 90 || r.Requests > 100 || r.Errors != 0 || r.P50 <= 0 || r.Max < r.P99 {
		t.Fatalf("disk at 500/s for 200 ms: %+v", r)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("of %d syncs over 3.00 ms", r.Requests)) {
		t.Errorf("report %q", out.String())
	}
}

// TestDevmsgWhen reads the instant from payloads as devmsg writes them
// and from other shapes through the decoder.
func TestDevmsgWhen(t *testing.T) {
	for _, tc := range []struct {
		payload string
		want    int64
		ok      bool
	}{
		{`{"msgid":"7","msg_body":"1764072000123456789","sent_time":1,"expire_time":2}`, 1764072000123456789, true},
		{`{"msg_body": "42", "msgid":"7"}`, 42, true},
		{`{"msgid":"7","msg_body":"not digits","sent_time":1}`, 0, false},
		{`{"msgid":"7","msg_body":"12\"3"}`, 0, false},
		{`not json`, 0, false},
	} {
		at, ok := devmsgWhen([]byte(tc.payload))
		if ok != tc.ok || (ok && at.UnixNano() != tc.want) {
			t.Errorf("devmsgWhen(%s) = %d, %v; want %d, %v", tc.payload, at.UnixNano(), ok, tc.want, tc.ok)
		}
	}
}

// TestRunFanoutTimeline runs fanout briefly with --timeline and checks
// that the timeline reads the server's counters: what it prints last
// has every message received and stored as delivered.
func TestRunFanoutTimeline(t *testing.T) {
	bin := buildDevmsg(t)
	o := small()
	o.Binary, o.Subscribers, o.Workloads = bin, 10, []string{"fanout"}
	o.Timeline = 50 * time.Millisecond
	var out, log bytes.Buffer
	o.Log = &log
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "\nfanout ") {
		t.Errorf("report lacks fanout:\n%s", out.String())
	}
	var rows [][6]float64
	for _, line := range strings.Split(log.String(), "\n") {
		var r [6]float64
		if n, _ := fmt.Sscanf(line, "timeline %f %f %f %f %f %f", &r[0], &r[1], &r[2], &r[3], &r[4], &r[5]); n == 6 {
			rows = append(rows, r)
		}
	}
	// A tick at 50 ms in a run of half a second, and the row at stop: a
	// loaded machine may answer /metrics too slowly for more.
	if len(rows) < 2 {
		t.Fatalf("%d timeline rows in half a second at 50 ms:\n%s", len(rows), log.String())
	}
	for _, r := range rows {
		if r[3] < 0 || r[4] < 0 {
			t.Fatalf("timeline without the server's counts: %v\n%s", r, log.String())
		}
	}
	if last := rows[len(rows)-1]; last[1] == 0 || last[4] == 0 {
		t.Errorf("the last timeline row %v: nothing sent or delivered", last)
	}
}

// TestRunCommands runs the command workloads briefly against a server
// the bench starts and their Mosquitto peers; it checks the report,
// never the speed.
func TestRunCommands(t *testing.T) {
	if _, err := exec.LookPath("mosquitto"); err != nil {
		if _, err := os.Stat("/usr/sbin/mosquitto"); err != nil {
			t.Skip("mosquitto not installed (Debian package mosquitto; CI installs it)")
		}
	}
	bin := buildDevmsg(t)
	o := small()
	// command-batch gives every device one command per call, so each
	// device answers as many calls a second as the loop makes over all of
	// them; 100 devices keep each well under the broker's answer rate.
	o.Binary, o.Devices, o.Subscribers, o.Rate = bin, 100, 100, 200
	o.Workloads = CommandWorkloads
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, w := range []string{"\ncommand-latency ", "\ncommand-batch ", "\nmosquitto-command-latency ", "\nmosquitto-command-batch ",
		"| command-batch |", "| mosquitto-command-batch |", "devmsg / mosquitto:", "round trips/s"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
	// Every command of every batch was answered, as its answer says, and
	// both peers counted batches after their warm-up.
	for line := range strings.Lines(report) {
		if strings.HasPrefix(line, "command-batch ") && !strings.Contains(line, " errors 0 ") {
			t.Errorf("command-batch had errors: %s", line)
		}
		if strings.Contains(line, "command-batch ") && strings.Contains(line, "(0 requests)") {
			t.Errorf("no batch measured: %s", line)
		}
	}
}

// TestCommandsMosquitto runs the Mosquitto peers of the command workloads
// on their own: MQTT 5 request/response through the bench's client.
func TestCommandsMosquitto(t *testing.T) {
	if _, err := exec.LookPath("mosquitto"); err != nil {
		if _, err := os.Stat("/usr/sbin/mosquitto"); err != nil {
			t.Skip("mosquitto not installed (Debian package mosquitto; CI installs it)")
		}
	}
	o := small()
	o.Subscribers, o.Rate, o.Duration = 20, 500, time.Second
	b := &runner{o: o}
	peer, err := startRequestPeer(context.Background(), o.Subscribers)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.stop()
	latency, err := b.requestLatencyMosquitto(context.Background(), peer.m, "mosquitto-command-latency")
	if err != nil {
		t.Fatal(err)
	}
	// Two turns add up: twice the requests of one, over twice the time.
	tot := newBatchTotal()
	for range 2 {
		if err := b.requestBatchMosquitto(context.Background(), peer.m, o.Duration, tot); err != nil {
			t.Fatal(err)
		}
	}
	batch := tot.result("mosquitto-command-batch", "")
	if tot.elapsed < 2*o.Duration {
		t.Errorf("two turns measured %s, want at least %s", tot.elapsed, 2*o.Duration)
	}
	for _, r := range []Result{latency, batch} {
		if r.Errors != 0 || r.PerSecond <= 0 || r.Requests == 0 || peer.failed.Load() != 0 {
			t.Errorf("%s: %+v", r.Workload, r)
		}
		t.Log(r.text())
	}
}

// TestRunJob runs the job workload briefly against a server the bench
// starts, with a few devices; it checks the report, never the speed.
func TestRunJob(t *testing.T) {
	bin := buildDevmsg(t)
	o := small()
	o.Binary, o.Devices, o.Subscribers, o.Rate = bin, 200, 10, 100
	o.Workloads = JobWorkloads
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, w := range []string{"\njob-send-base ", "\njob-send ", "\njob-busy ", "\njob ", "200 targets, 10 online",
		"| job |", "| job-send |", "job-send / job-send-base p99:", "all 200 started", "errors 0"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
	if strings.Contains(report, "warning") {
		t.Errorf("unexpected warning:\n%s", report)
	}
}
