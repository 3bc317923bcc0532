package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"

	"github.com/devmsg/devmsg/internal/gcfloor"
)

// version is set at build time with -ldflags "-X main.version=...". Left
// at "dev" (go install, go build), buildVersion reads the version from the
// build info Go embeds.
var version = "dev"

// subcommand is an entry point and its line in devmsg's usage.
type subcommand struct {
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// help says what it does in one line; "" keeps it out of the usage.
	help string
}

// subcommands maps a subcommand's name to it.
var subcommands = map[string]subcommand{
	"serve": {runServe, "run the service: REST and admin API, web console and MQTT broker"},
	"sim":   {runSim, "connect simulated devices over MQTT that receive and acknowledge messages"},
	// events tails an app's event log (docs/operations.md, "Watching an
	// app's events from a terminal").
	"events": {runEvents, "tail an app's event log, optionally forwarding it to a webhook URL"},
	"bench":  {runBench, "measure a devmsg server's throughput and latency and print a report"},
	// healthcheck is a container's health check (docker-compose.yml).
	"healthcheck": {runHealthcheck, "exit 0 if the devmsg serving on this machine is ready (GET /readyz), else 1"},
	// bench-client is internal: the client processes of devmsg bench.
	"bench-client": {runBenchClient, ""},
	"version": {func(_ context.Context, _ []string, stdout, _ io.Writer) error {
		_, err := fmt.Fprintln(stdout, "devmsg", buildVersion())
		return err
	}, "print devmsg's version"},
}

// buildVersion is the linked-in version or, without one, the version Go
// recorded in the binary.
func buildVersion() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	return versionOf(info)
}

// versionOf is the module's version when Go knows it (go install
// module@version), else the VCS revision the binary was built from,
// shortened, with "-dirty" when the checkout had uncommitted changes,
// else "dev".
func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// defaultGCPercent replaces Go's default of 100 unless GOGC is set. The
// live heap is small (tens of MiB), and under load GC cycles ran every few
// milliseconds; measured with devmsg bench, 400 raised the send rate by
// about a tenth for a few tens of MiB more memory.
const defaultGCPercent = 400

// heapFloor is the heap goal below which the GC does not collect unless
// GOGC is set (docs/configuration.md); GOMEMLIMIT, when set, still bounds
// it. With a live heap of a few MiB, GOGC alone collected every second or
// two under load, and on two cores each cycle held up requests for tens
// of milliseconds: the p99 of command-latency was those cycles. At 128
// MiB a collection still came every 3.3 s at 2,000 commands/s; at 512
// MiB every 15.6 s, and command-latency's p99.9 fell from 10 to
// 20 ms to 8 to 11 ms. What a burst leaves below the floor is collected
// and returned to the OS once the process goes quiet (gcfloor).
const heapFloor = 512 << 20

func main() {
	if os.Getenv("GOGC") == "" {
		gcfloor.Start(heapFloor, defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		// After the first signal, restore the default handling so a second
		// one kills the process instead of waiting out the graceful drain.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "devmsg:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// run is the whole program; tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h" || args[0] == "help") {
		writeUsage(stdout)
		return nil
	}
	if len(args) == 0 {
		writeUsage(stderr)
		return errUsage
	}
	sub, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "devmsg: unknown subcommand %q\n\n", args[0])
		writeUsage(stderr)
		return errUsage
	}
	return sub.run(ctx, args[1:], stdout, stderr)
}

// writeUsage lists the subcommands with what each does.
func writeUsage(w io.Writer) {
	names := make([]string, 0, len(subcommands))
	width := 0
	for n, sub := range subcommands {
		if sub.help == "" {
			continue
		}
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: devmsg <subcommand> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "subcommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, subcommands[n].help)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "devmsg <subcommand> --help lists a subcommand's flags.")
}
