package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultChurnCycles is how many connect/subscribe/disconnect cycles the
// churn workload runs, enough to show that devices coming and going leave
// nothing behind (docs/operations.md, "Sizing a node for many connected
// devices").
const DefaultChurnCycles = 200_000

// churnProcesses and churnWorkers spread the churn over client processes,
// with this many connections cycling at once in each. Each process
// connects from churnSources source addresses in turn (127.0.0.2 upwards,
// none shared): the server closes each connection first, so its side
// keeps the connection's address pair in TIME_WAIT for a minute, and a
// client that comes back to the same pair sooner can be reset. 64
// addresses give 1.8 million pairs, the 200,000 cycles need at most as
// many within a minute.
const (
	churnProcesses = 4
	churnWorkers   = 16
	churnSources   = 16
)

// churnDevmsg is the churn workload: Options.ChurnCycles cycles of
// connect, subscribe to msg, DISCONNECT over the first Options.Devices
// devices (each process its own share, so no cycle takes over another's
// session), then the server's RSS, goroutines and heap after a forced GC
// against the same before the cycles.
func (b *runner) churnDevmsg(ctx context.Context, out io.Writer) error {
	before, err := b.gcSnapshot(ctx, "churn-before")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "devmsg-churn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n := min(b.o.Devices, len(b.secrets))
	procs := min(churnProcesses, n)
	var wg sync.WaitGroup
	errs := make([]error, procs)
	start := time.Now()
	for k := range procs {
		var lines []string
		for i := k; i < n; i += procs {
			user := b.key + "/" + deviceName(i)
			lines = append(lines, user+","+b.secrets[i]+",d/"+user+"/msg")
		}
		file := filepath.Join(dir, strconv.Itoa(k))
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
			return err
		}
		cycles := b.o.ChurnCycles / procs
		if k < b.o.ChurnCycles%procs {
			cycles++
		}
		var srcs []string
		for j := range churnSources {
			srcs = append(srcs, fmt.Sprintf("127.0.0.%d", 2+k+j*procs))
		}
		cmd := exec.CommandContext(ctx, b.exe, "bench-client", "--addr", b.nodes[0].mqtt, "--src", strings.Join(srcs, ","),
			"--creds", file, "--cycles", strconv.Itoa(cycles), "--workers", strconv.Itoa(churnWorkers))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = runChurnProcess(cmd)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("churn clients: %w", err)
	}
	// The server handles a disconnect after the client has seen the
	// connection close; give the last ones a moment.
	time.Sleep(5 * time.Second)
	after, err := b.gcSnapshot(ctx, "churn-after")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-16s %-9s %d connect/subscribe/disconnect cycles over %d devices from %d processes in %.1f s (%.0f/s)\n",
		"churn", "devmsg", b.o.ChurnCycles, n, procs, elapsed.Seconds(), float64(b.o.ChurnCycles)/elapsed.Seconds())
	fmt.Fprintf(out, "%-16s %-9s after a forced GC, before → after: RSS %.1f → %.1f MiB, goroutines %.0f → %.0f, heap in use %.1f → %.1f MiB, live heap %.1f → %.1f MiB, stacks %.2f → %.2f MiB\n",
		"churn", "devmsg", before.rss/(1<<20), after.rss/(1<<20), before.goroutines, after.goroutines,
		before.heapInuse/(1<<20), after.heapInuse/(1<<20), before.heapAlloc/(1<<20), after.heapAlloc/(1<<20),
		before.stack/(1<<20), after.stack/(1<<20))
	return nil
}

// runChurnProcess runs one churn client process and waits for its
// "done N" line.
func runChurnProcess(cmd *exec.Cmd) error {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	line, rerr := bufio.NewReader(stdout).ReadString('\n')
	werr := cmd.Wait()
	if rerr == nil && !strings.HasPrefix(line, "done") {
		rerr = errors.New(strings.TrimSpace(line))
	}
	return errors.Join(rerr, werr)
}

// RunChurnClient is `devmsg bench-client --cycles N`: workers connections
// at a time, each cycle connects the next device of the credentials
// file, subscribes, sends DISCONNECT and waits for the server to close
// the connection, until cycles cycles are done; then it prints "done N".
// Each worker cycles through devices of its own (every workers-th), so no
// two cycles of one device overlap: that would be a takeover, which
// closes the older connection. src is a comma-separated list of source addresses,
// used in turn.
func RunChurnClient(ctx context.Context, addr, src, credsFile string, cycles, workers int, out io.Writer) error {
	srcs := strings.Split(src, ",")
	data, err := os.ReadFile(credsFile)
	if err != nil {
		return err
	}
	var creds [][]string
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ",", 3)
		if len(parts) != 3 {
			return fmt.Errorf("%s line %d: want user,password,topic", credsFile, i+1)
		}
		creds = append(creds, parts)
	}
	workers = max(1, min(workers, len(creds)))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Worker w owns devices w, w+workers, w+2*workers...
			mine := (len(creds) - w + workers - 1) / workers
			for k := 0; ctx.Err() == nil; k++ {
				n := next.Add(1)
				if n > int64(cycles) {
					return
				}
				c := creds[w+workers*(k%mine)]
				if err := churnCycle(addr, srcs[n%int64(len(srcs))], c[0], c[1], c[2]); err != nil {
					errs[w] = fmt.Errorf("cycle of %s: %w", c[0], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(out, "error: %v\n", err)
		return err
	}
	fmt.Fprintf(out, "done %d\n", cycles)
	return ctx.Err()
}

// churnCycle connects, subscribes, disconnects and waits for the server
// to close the connection.
func churnCycle(addr, src, user, pass, topic string) error {
	c, err := dialMQTT(addr, src, user, user, pass, 60)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.subscribe(topic); err != nil {
		return err
	}
	if err := c.write(0xE0, nil); err != nil {
		return err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := c.read(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
