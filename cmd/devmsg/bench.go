package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/devmsg/devmsg/cmd/devmsg/internal/bench"
)

// runBench is `devmsg bench`: flags here, the work in package bench.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: devmsg bench [flags]")
		fmt.Fprintln(stderr, "Measures a devmsg server (by default one it starts in a temp dir) and prints a report for BENCHMARKS.md.")
		fmt.Fprintln(stderr, "With --target it creates an app and --devices devices on that server and leaves them there.")
		fmt.Fprintln(stderr, "With --store redis it also starts a redis-server (from PATH) on a loopback port for the servers it starts,")
		fmt.Fprintln(stderr, "and reports that process's CPU beside theirs; with --nodes N it starts N servers on that Redis, spreads")
		fmt.Fprintln(stderr, "REST workers and MQTT devices over them and sends each delivered message through a node other than its device's.")
		fmt.Fprintln(stderr, "A run naming the job workload creates 100000 devices unless --devices says otherwise.")
		fs.PrintDefaults()
	}
	var o bench.Options
	var workloads string
	fs.StringVar(&o.Target, "target", "", "base URL of a running server, e.g. https://127.0.0.1:8443 (default: start one)")
	fs.StringVar(&o.AdminUser, "admin-user", "admin", "admin username of --target")
	fs.StringVar(&o.AdminPassword, "admin-password", "", "admin password of --target")
	fs.IntVar(&o.Devices, "devices", 2000, "devices to create; each holds at most 1000 pending messages (default with the job workload: 100000)")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "connections of the closed-loop workloads (send, property)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per workload")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured time before each closed-loop workload")
	fs.IntVar(&o.Rate, "rate", 0, "open-loop requests/s (default: half the matching closed-loop rate of this run, else 5000; telemetry: 5000 events/s; deliver-latency and command-latency: 2000/s; the single sends beside the job: 500/s)")
	fs.IntVar(&o.LatencyConns, "latency-conns", 128, "connections of the open-loop workloads")
	fs.StringVar(&workloads, "workloads", strings.Join(bench.Workloads, ","),
		"comma-separated workloads, run in this order; run only when named: device workloads "+strings.Join(bench.DeviceWorkloads, ",")+
			", callback workloads "+strings.Join(bench.CallbackWorkloads, ",")+
			", event workloads "+strings.Join(bench.EventWorkloads, ",")+
			", fleet workloads "+strings.Join(bench.FleetWorkloads, ",")+", command workloads "+strings.Join(bench.CommandWorkloads, ",")+
			", job workloads "+strings.Join(bench.JobWorkloads, ",")+
			", machine workloads "+strings.Join(bench.DiskWorkloads, ","))
	fs.BoolVar(&o.Markdown, "markdown", false, "also print a Markdown table for BENCHMARKS.md")
	fs.IntVar(&o.Subscribers, "subscribers", 1000, "devices connected over MQTT for deliver-latency, deliver, mosquitto, callback-lag, telemetry (which publish) and the command and job workloads (which answer)")
	fs.IntVar(&o.IdleDevices, "idle-devices", 18000, "devices connected for idle-memory (spread over client processes of 4500)")
	fs.IntVar(&o.ChurnCycles, "churn-cycles", bench.DefaultChurnCycles, "connect/subscribe/disconnect cycles of churn, over --devices devices")
	fs.StringVar(&o.MQTTAddr, "mqtt", "", "MQTT TCP address of --target, for the device workloads")
	fs.StringVar(&o.ServerPprof, "server-pprof", "", "directory for a server CPU profile per workload (<workload>.pprof; <workload>.node<k>.pprof with --nodes)")
	fs.BoolVar(&o.ServerTrace, "server-trace", false, "with --server-pprof, also a runtime trace of the server per workload (<workload>.trace; go tool trace)")
	fs.StringVar(&o.Store, "store", bench.StoreEmbedded, "store of the servers the bench starts: "+bench.StoreEmbedded+" (Pebble) or "+bench.StoreRedis+" (a redis-server it starts)")
	fs.StringVar(&o.RedisFsync, "redis-fsync", "everysec", "appendfsync of the redis-server of --store redis: "+strings.Join(bench.RedisFsyncModes, " or "))
	fs.StringVar(&o.Binary, "server-binary", "", "devmsg executable to start as the server (and the client processes of idle-memory and churn); default this one: to compare two builds' servers under one bench")
	fs.DurationVar(&o.Timeline, "timeline", 0, "fanout: print to stderr, at this interval (e.g. 200ms), the messages sent and received so far and the server's published and delivered counts; job: with any value, each job's commands started at every poll (100ms)")
	fs.IntVar(&o.Nodes, "nodes", 1, "servers to start on one store (more than 1 needs --store redis; not with idle-memory or mosquitto)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	for _, w := range strings.Split(workloads, ",") {
		if w = strings.TrimSpace(w); w != "" {
			o.Workloads = append(o.Workloads, w)
		}
	}
	devicesSet := false
	fs.Visit(func(f *flag.Flag) { devicesSet = devicesSet || f.Name == "devices" })
	if !devicesSet && slices.ContainsFunc(o.Workloads, func(w string) bool { return slices.Contains(bench.JobWorkloads, w) }) {
		o.Devices = bench.DefaultJobDevices
	}
	return bench.Run(ctx, o, stdout)
}

// runBenchClient is `devmsg bench-client`, the device client processes
// that devmsg bench idle-memory and churn start.
func runBenchClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:1883", "MQTT TCP address")
	src := fs.String("src", "", "local address to connect from (with --cycles: a comma-separated list, used in turn)")
	creds := fs.String("creds", "", `file of "user,password,topic" lines, one per device`)
	cycles := fs.Int("cycles", 0, "connect/subscribe/disconnect cycles to run (churn); 0: connect every device and stay idle")
	workers := fs.Int("workers", 16, "connections cycling at once, with --cycles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cycles > 0 {
		return bench.RunChurnClient(ctx, *addr, *src, *creds, *cycles, *workers, stdout)
	}
	return bench.RunIdleClient(ctx, *addr, *src, *creds, stdout)
}
