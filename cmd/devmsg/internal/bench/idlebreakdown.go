package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memSnapshot is what the server's /metrics says about its memory right
// after a forced GC, with its RSS read at the same moment.
type memSnapshot struct {
	rss, stack, heapInuse, heapAlloc, goroutines float64
}

// breakdownGauges are the /metrics gauges a memSnapshot reads.
var breakdownGauges = []string{
	"go_memstats_stack_inuse_bytes",
	"go_memstats_heap_inuse_bytes",
	"go_memstats_heap_alloc_bytes",
	"go_goroutines",
}

// gcSnapshot forces a GC on the first server (its admin-only
// /debug/pprof/heap?gc=1, twice, so the second sweeps what the first
// freed), then reads its gauges and RSS. With Options.ServerPprof it
// keeps the heap profile and the goroutine dump as
// idle-memory.<stage>.heap.pprof and idle-memory.<stage>.goroutines.txt.
func (b *runner) gcSnapshot(ctx context.Context, stage string) (memSnapshot, error) {
	c := newClient()
	c.Timeout = 0
	defer c.CloseIdleConnections()
	get := func(path string) ([]byte, error) {
		st, body, err := do(ctx, c, http.MethodGet, b.target+path, b.o.AdminUser, b.o.AdminPassword, nil)
		if err != nil || st != http.StatusOK {
			return nil, fmt.Errorf("get %s: %s", path, failure(st, body, err))
		}
		return body, nil
	}
	var heap []byte
	for range 2 {
		var err error
		if heap, err = get("/debug/pprof/heap?gc=1"); err != nil {
			return memSnapshot{}, err
		}
	}
	metrics, err := get("/metrics")
	if err != nil {
		return memSnapshot{}, err
	}
	r, err := rss(b.serverPID)
	if err != nil {
		return memSnapshot{}, err
	}
	g, err := gauges(bytes.NewReader(metrics), breakdownGauges)
	if err != nil {
		return memSnapshot{}, err
	}
	if dir := b.o.ServerPprof; dir != "" {
		dump, err := get("/debug/pprof/goroutine?debug=1")
		if err != nil {
			return memSnapshot{}, err
		}
		base := filepath.Join(dir, "idle-memory."+stage)
		if err := os.WriteFile(base+".heap.pprof", heap, 0o644); err != nil {
			return memSnapshot{}, err
		}
		if err := os.WriteFile(base+".goroutines.txt", dump, 0o644); err != nil {
			return memSnapshot{}, err
		}
	}
	return memSnapshot{rss: float64(r), stack: g[0], heapInuse: g[1], heapAlloc: g[2], goroutines: g[3]}, nil
}

// gauges reads the named unlabelled gauges from a Prometheus text
// exposition, in the order asked.
func gauges(r io.Reader, names []string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name == n {
				v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					return nil, fmt.Errorf("metric %s: %w", n, err)
				}
				out[i], found[i] = v, true
			}
		}
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("metric %s missing", names[i])
		}
	}
	return out, sc.Err()
}

// printBreakdown prints the per-device cost after a forced GC: what the
// connected devices (at) cost over the same server without them (base).
func printBreakdown(out io.Writer, devices int, base, at memSnapshot) {
	per := func(a, b float64) float64 { return (b - a) / float64(devices) / 1024 }
	fmt.Fprintf(out, "%-16s %-9s after a forced GC: RSS %.1f MiB → %.1f MiB; per device: RSS %.1f KiB, stacks %.2f KiB, heap in use %.2f KiB, live heap %.2f KiB, %.2f goroutines\n",
		"idle-memory", "devmsg", base.rss/(1<<20), at.rss/(1<<20), per(base.rss, at.rss), per(base.stack, at.stack), per(base.heapInuse, at.heapInuse),
		per(base.heapAlloc, at.heapAlloc), (at.goroutines-base.goroutines)/float64(devices))
}
