package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// DiskWorkloads measure the machine, not devmsg.
var DiskWorkloads = []string{"disk"}

// diskStall is a sync slow enough to show in a 10 ms latency budget.
const diskStall = 3 * time.Millisecond

// disk writes 512 bytes and syncs them (fdatasync, as Pebble's WAL
// does) at the deliver rate for the measured duration, in a file beside
// the data dirs of the servers the bench starts (os.TempDir), and reports
// the syncs' latency. Every delivered message waits for a sync, so a
// disk that stalls for 15 ms every 100 ms (a shared virtual disk under
// another tenant's writes does) puts its stalls into deliver-latency's
// p99 whatever the server does; run it beside that workload
// (--workloads disk,deliver-latency,disk) to tell the two apart.
func (b *runner) disk(ctx context.Context, workload string, out io.Writer) (Result, error) {
	f, err := os.CreateTemp("", "devmsg-bench-disk-")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rate := b.deliverRate()
	every := time.Second / time.Duration(rate)
	buf := make([]byte, 512)
	t := newTally()
	var stalls []string
	stalled := 0
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= b.o.Duration {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		began := time.Now()
		_, err := f.Write(buf)
		if err == nil {
			err = syncData(f)
		}
		d := time.Since(began)
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		t.add(err == nil, reason, d)
		if d > diskStall {
			stalled++
			if len(stalls) < 10 {
				stalls = append(stalls, fmt.Sprintf("%.3f s %s", began.Sub(start).Seconds(), ms(d)))
			}
		}
	}
	r := t.result(workload, fmt.Sprintf("%d/s", rate), time.Since(start))
	r.ServerCPU, r.BenchCPU, r.RedisCPU = -1, -1, -1
	fmt.Fprintf(out, "%s: %d of %d syncs over %s; the first (into the run, latency): %v\n", workload, stalled, t.n, ms(diskStall), stalls)
	return r, ctx.Err()
}
