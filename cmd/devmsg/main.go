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
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// subcommands maps a subcommand to its entry point.
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"serve": runServe,
	"sim":   runSim,
	// events tails an app's event log (docs/operations.md, "Watching an
	// app's events from a terminal").
	"events": runEvents,
	"bench":  runBench,
	// bench-client is internal: the client processes of devmsg bench.
	"bench-client": runBenchClient,
	"version": func(_ context.Context, _ []string, stdout, _ io.Writer) error {
		_, err := fmt.Fprintln(stdout, "devmsg", version)
		return err
	},
}

// defaultGCPercent replaces Go's default of 100 unless GOGC is set. The
// live heap is small (tens of MiB), and under load GC cycles ran every few
// milliseconds; measured with devmsg bench, 400 raised the send rate by
// about a tenth for a few tens of MiB more memory.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
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
	if len(args) == 0 || subcommands[args[0]] == nil {
		names := make([]string, 0, len(subcommands))
		for n := range subcommands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(stderr, "usage: devmsg <%s> [flags]\n", strings.Join(names, "|"))
		return errUsage
	}
	return subcommands[args[0]](ctx, args[1:], stdout, stderr)
}
