package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// mosquitto is Debian's Mosquitto broker on a free loopback port, without
// persistence, as a team would run it in place of devmsg. maxQueued is
// its max_queued_messages per client (0: no limit).
type mosquitto struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

func startMosquitto(ctx context.Context, maxQueued int) (*mosquitto, error) {
	return startMosquittoWith(ctx, maxQueued, "")
}

// startMosquittoWith is startMosquitto with more lines of configuration.
func startMosquittoWith(ctx context.Context, maxQueued int, extra string) (*mosquitto, error) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/mosquitto"); statErr != nil {
			return nil, errors.New("mosquitto not found (Debian package mosquitto)")
		}
		bin = "/usr/sbin/mosquitto"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "devmsg-mosquitto-")
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages %d\nmax_inflight_messages 64\nlog_dest stderr\nlog_type error\n%s", port, maxQueued, extra)
	if err := os.WriteFile(filepath.Join(dir, "mosquitto.conf"), []byte(conf), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Mosquitto needs a descriptor per client: raise its soft limit to the
	// hard one, as an operator running it for a fleet would.
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -n "$(ulimit -Hn)" && exec "$0" -c "$1"`, bin, filepath.Join(dir, "mosquitto.conf"))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	m := &mosquitto{cmd: cmd, dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port)}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", m.addr)
		if err == nil {
			c.Close()
			return m, nil
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("mosquitto did not listen on %s: %w", m.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (m *mosquitto) stop() {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	os.RemoveAll(m.dir)
}

func mosquittoTopic(i int) string { return "d/bench/" + deviceName(i) + "/msg" }

// deliverMosquitto measures Mosquitto like deliverDevmsg measures devmsg:
// Subscribers devices subscribed at QoS 1, and one publisher client
// sending QoS 1 to their topics at rate (or, with rate 0, back to back
// with up to 1000 unacknowledged publishes).
func (b *runner) deliverMosquitto(ctx context.Context, m *mosquitto, workload string, rate int) (Result, error) {
	t, mu, got := newTally(), &sync.Mutex{}, &atomic.Int64{}
	conns, err := connectSubscribers(b.o.Subscribers, func(i int) (*mqttConn, string, error) {
		c, err := dialMQTT(m.addr, "", "sub-"+deviceName(i), "", "", 60)
		return c, mosquittoTopic(i), err
	}, func(p []byte) (time.Time, bool) { return parseNanos(string(p)) }, t, mu, got)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(conns)
	pub, err := dialMQTT(m.addr, "", "bench-publisher", "", "", 60)
	if err != nil {
		return Result{}, err
	}
	defer pub.close()
	acks := make(chan struct{}, 1000)
	go func() { _ = pub.serve(nil, func(uint16) { <-acks }) }()
	var sent, failed atomic.Int64
	start := time.Now()
	n := 0
	publish := func(at time.Time) {
		if _, err := pub.publish(mosquittoTopic(n%b.o.Subscribers), strconv.AppendInt(nil, at.UnixNano(), 10)); err != nil {
			failed.Add(1)
		} else {
			sent.Add(1)
		}
		n++
	}
	if rate > 0 {
		interval := time.Second / time.Duration(rate)
		for i := 0; i < int(b.o.Duration/interval) && ctx.Err() == nil; i++ {
			at := start.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			acks <- struct{}{}
			publish(at)
		}
	} else {
		for end := start.Add(b.o.Duration); time.Now().Before(end) && ctx.Err() == nil; {
			acks <- struct{}{} // at most cap(acks) unacknowledged
			publish(time.Now())
		}
	}
	sendEnd := time.Now()
	for deadline := time.Now().Add(10 * time.Second); got.Load() < sent.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if rate == 0 {
		elapsed = sendEnd.Sub(start)
	}
	mu.Lock()
	r := t.result(workload, loadLabel(rate, 1, b.o.Subscribers), elapsed)
	mu.Unlock()
	r.Requests, r.Errors = sent.Load()+failed.Load(), failed.Load()+sent.Load()-got.Load()
	r.PerSecond = float64(got.Load()) / elapsed.Seconds()
	r.ServerCPU, r.BenchCPU, r.RedisCPU = -1, -1, -1
	if lost := sent.Load() - got.Load(); lost > 0 {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d published messages did not arrive within 10 s", lost))
	}
	return r, nil
}

// compareMosquitto runs the Mosquitto side of every device workload of
// this run and prints devmsg's numbers as ratios to Mosquitto's.
func (b *runner) compareMosquitto(ctx context.Context, out io.Writer, devmsg brokerRun) ([]Result, error) {
	m, err := startMosquitto(ctx, 1000)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	var mq brokerRun
	var results []Result
	lat, err := b.deliverMosquitto(ctx, m, "mosquitto-latency", b.deliverRate())
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, lat.text())
	results = append(results, lat)
	mq.latency = &lat
	thr, err := b.deliverMosquitto(ctx, m, "mosquitto-deliver", 0)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, thr.text())
	results = append(results, thr)
	mq.deliver = &thr
	if devmsg.idleMeasured {
		creds := make([]string, b.o.IdleDevices)
		for i := range creds {
			creds[i] = ",," + mosquittoTopic(i)
		}
		if mq.perDevice, err = idleMemory(ctx, b.exe, m.cmd.Process.Pid, m.addr, creds, out, "mosquitto", nil); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(out, "devmsg / mosquitto:")
	if devmsg.deliver != nil && mq.deliver.PerSecond > 0 {
		fmt.Fprintf(out, "  delivered messages/s  %.2f (%.0f vs %.0f)\n", devmsg.deliver.PerSecond/mq.deliver.PerSecond, devmsg.deliver.PerSecond, mq.deliver.PerSecond)
	}
	if devmsg.fanout != nil && mq.deliver.PerSecond > 0 {
		fmt.Fprintf(out, "  fanout delivered/s vs relay  %.2f (%.0f vs %.0f)\n", devmsg.fanout.PerSecond/mq.deliver.PerSecond, devmsg.fanout.PerSecond, mq.deliver.PerSecond)
	}
	if devmsg.latency != nil && mq.latency.P99 > 0 {
		fmt.Fprintf(out, "  p99 latency at %d/s   %.2f (%s vs %s)\n", b.deliverRate(), float64(devmsg.latency.P99)/float64(mq.latency.P99), ms(devmsg.latency.P99), ms(mq.latency.P99))
	}
	switch {
	case devmsg.perDevice > 0 && mq.perDevice > 0:
		fmt.Fprintf(out, "  memory per device     %.2f (%.1f KiB vs %.1f KiB)\n", devmsg.perDevice/mq.perDevice, devmsg.perDevice/1024, mq.perDevice/1024)
	case devmsg.idleMeasured:
		// With few devices, RSS noise (the scavenger returning pages) can
		// outweigh the devices' cost on either side.
		fmt.Fprintf(out, "  memory per device     n/a (%.1f KiB vs %.1f KiB: too few devices to measure)\n", devmsg.perDevice/1024, mq.perDevice/1024)
	}
	return results, nil
}

func (b *runner) deliverRate() int {
	if b.o.Rate > 0 {
		return b.o.Rate
	}
	return DefaultDeliverRate
}
