package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/devmsg/devmsg/bench"
)

// runBench is `devmsg bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.Options
	var workloads string
	fs.StringVar(&o.Target, "target", "", "base URL of a running server (default: start one in a temp dir)")
	fs.StringVar(&o.AdminUser, "admin-user", "admin", "admin username for --target")
	fs.StringVar(&o.AdminPassword, "admin-password", "", "admin password for --target")
	fs.IntVar(&o.Devices, "devices", 2000, "devices to create")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "connections of the closed-loop workloads")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per workload")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured time before each closed-loop workload")
	fs.IntVar(&o.Rate, "rate", 0, "open-loop rate per second (default: half the closed-loop rate measured in this run)")
	fs.StringVar(&workloads, "workloads", "send,property,send-latency,property-latency", "comma-separated workloads")
	fs.BoolVar(&o.Markdown, "markdown", false, "also print a Markdown table for BENCHMARKS.md")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Workloads = strings.Split(workloads, ",")
	return bench.Run(ctx, o, stdout)
}
