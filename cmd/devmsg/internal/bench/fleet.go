package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FleetWorkloads measure fleet messaging: batch sends and broadcasts to
// many devices. They run only when named in Options.Workloads:
//
//   - fanout: Subscribers devices connected over MQTT; FanoutWorkers REST
//     workers send POST /msg/v1/msgs of up to 1000 of them back to back
//     for Duration; messages delivered (and acknowledged) per second from
//     the first send to the last delivery, with latency from
//     each batch's send to each message's arrival. Mosquitto's relay of
//     QoS 1 to the same subscribers (mosquitto-deliver, in the mosquitto
//     workload) is its peer.
//   - broadcast: one POST /msg/v1/broadcast to every registered device
//     (--devices; mostly offline), timed from the POST to the broadcast's
//     state done: messages queued per second.
var FleetWorkloads = []string{"fanout", "broadcast"}

// FanoutWorkers is how many REST workers fanout runs: each request
// carries up to 1000 messages, so a few saturate the server.
const FanoutWorkers = 4

// fanoutDevmsg runs fanout.
func (b *runner) fanoutDevmsg(ctx context.Context, workload string) (Result, error) {
	if b.nodes[0].mqtt == "" {
		return Result{}, errors.New(workload + " needs the server's MQTT address: run without --target, or give --mqtt")
	}
	t, mu, got := newTally(), &sync.Mutex{}, &atomic.Int64{}
	since := time.Now()
	fresh := func(payload []byte) (time.Time, bool) {
		at, ok := devmsgWhen(payload)
		return at, ok && !at.Before(since)
	}
	conns, err := connectSubscribers(b.o.Subscribers, b.dialDevice, fresh, t, mu, got)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(conns)
	// The batches: the subscribers in groups of at most 1000.
	var groups [][]string
	for from := 0; from < b.o.Subscribers; from += 1000 {
		var names []string
		for i := from; i < min(from+1000, b.o.Subscribers); i++ {
			names = append(names, fmt.Sprintf("%q", deviceName(i)))
		}
		groups = append(groups, names)
	}
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	win := b.begin(ctx, workload)
	start := time.Now()
	end := start.Add(b.o.Duration)
	for w := range FanoutWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			for k := w; time.Now().Before(end) && ctx.Err() == nil; k++ {
				names := groups[k%len(groups)]
				n, reason := b.sendBatch(ctx, c, names, time.Now())
				sent.Add(int64(n))
				if n < len(names) && failed.Add(int64(len(names)-n)) == int64(len(names)-n) {
					firstErr.Store(reason)
				}
			}
		}()
	}
	stopTimeline := b.timeline(ctx, start, &sent, got)
	defer stopTimeline()
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); got.Load() < sent.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Until the last delivery, not the last send: the sends outrun the
	// deliveries, and a server that falls behind must not be credited
	// with its backlog as if it had kept up.
	elapsed := time.Since(start)
	mu.Lock()
	r := t.result(workload, fmt.Sprintf("%d conns × %d, %d dev", FanoutWorkers, len(groups[0]), b.o.Subscribers), elapsed)
	mu.Unlock()
	r.Requests, r.Errors = sent.Load()+failed.Load(), failed.Load()+sent.Load()-got.Load()
	r.PerSecond = float64(got.Load()) / elapsed.Seconds()
	if v := firstErr.Load(); v != nil {
		r.FirstErrors = []string{v.(string)}
	}
	if lost := sent.Load() - got.Load(); lost > 0 {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d sent messages did not arrive within 10 s", lost))
	}
	return r, win.end(&r)
}

// sendBatch posts one batch send to the quoted names whose body is the
// instant at, and returns how many messages it queued.
func (b *runner) sendBatch(ctx context.Context, c *conn, names []string, at time.Time) (int, string) {
	seq := b.seqBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_names":[%s],"msg_body":"%d","ttl":3600}`, seq, strings.Join(names, ","), at.UnixNano())
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/msg/v1/msgs", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return 0, failure(st, resp, err)
	}
	var out struct {
		Resp []struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"resp"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return 0, err.Error()
	}
	n, reason := 0, ""
	for _, r := range out.Resp {
		if r.Code == 0 {
			n++
		} else if reason == "" {
			reason = fmt.Sprintf("code %d %s", r.Code, r.Message)
		}
	}
	return n, reason
}

// broadcastDevmsg runs broadcast: one broadcast to every device, timed
// until it is done. Progress is polled every 100 ms.
func (b *runner) broadcastDevmsg(ctx context.Context, workload string) (Result, error) {
	c := b.workerConn(ctx, 0)
	defer c.close()
	win := b.begin(ctx, workload)
	start := time.Now()
	body := fmt.Appendf(nil, `{"seq_no":%d,"target":{"all":true},"msg_body":"bench broadcast","ttl":3600}`, b.seqBase+b.seq.Add(1))
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/msg/v1/broadcast", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return Result{}, fmt.Errorf("broadcast: %s", failure(st, resp, err))
	}
	accepted := time.Since(start)
	var acc struct {
		ID      int64 `json:"broadcast_id"`
		Targets int64 `json:"targets"`
	}
	if err := json.Unmarshal(resp, &acc); err != nil {
		return Result{}, fmt.Errorf("broadcast: %w", err)
	}
	var view struct {
		State  string `json:"state"`
		Queued int64  `json:"queued"`
	}
	for view.State != "done" {
		if ctx.Err() != nil || time.Since(start) > 10*time.Minute {
			return Result{}, fmt.Errorf("broadcast %d not done after %s: %+v", acc.ID, time.Since(start).Round(time.Second), view)
		}
		time.Sleep(100 * time.Millisecond)
		st, resp, err := do(ctx, c.c, http.MethodGet, fmt.Sprintf("%s/msg/v1/broadcast?broadcast_id=%d", c.base, acc.ID), b.key, b.secret, nil)
		if err != nil || st != http.StatusOK {
			return Result{}, fmt.Errorf("broadcast progress: %s", failure(st, resp, err))
		}
		if err := json.Unmarshal(resp, &view); err != nil {
			return Result{}, fmt.Errorf("broadcast progress: %w", err)
		}
	}
	elapsed := time.Since(start)
	r := Result{
		Workload: workload, Load: fmt.Sprintf("%d targets", acc.Targets), Requests: view.Queued,
		Errors: acc.Targets - view.Queued, PerSecond: float64(view.Queued) / elapsed.Seconds(),
		P50: accepted, P99: accepted, P999: accepted, Max: elapsed,
	}
	if r.Errors != 0 {
		r.FirstErrors = []string{fmt.Sprintf("%d of %d targets got no message", r.Errors, acc.Targets)}
	}
	return r, win.end(&r)
}

// timeline prints, every Options.Timeline and once more at stop, the
// messages sent (queued by the batch sends) and received by the devices
// so far, beside the server's devmsg_messages_published_total (written to
// the devices) and devmsg_messages_delivered_total (their PUBACKs
// stored): received minus delivered is what waits for the server's
// PUBACK writes. Node 1's counts only.
func (b *runner) timeline(ctx context.Context, start time.Time, sent, got *atomic.Int64) (stop func()) {
	if b.o.Timeline <= 0 {
		return func() {}
	}
	out := b.o.Log
	if out == nil {
		out = os.Stderr
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c := newClient()
		defer c.CloseIdleConnections()
		t := time.NewTicker(b.o.Timeline)
		defer t.Stop()
		fmt.Fprintln(out, "timeline: seconds, sent, received, published, delivered, received but not yet stored as delivered")
		row := func() {
			pub, del := b.deliveryCounts(ctx, c)
			rcv := got.Load()
			fmt.Fprintf(out, "timeline %6.2f %8d %8d %8d %8d %7d\n", time.Since(start).Seconds(), sent.Load(), rcv, pub, del, rcv-del)
		}
		// The last row is the run's end, however few ticks a loaded
		// server's /metrics answered in time.
		defer row()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				row()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// deliveryCounts reads node 1's published and delivered counters, -1
// when they cannot be read.
func (b *runner) deliveryCounts(ctx context.Context, c *http.Client) (published, delivered int64) {
	published, delivered = -1, -1
	st, body, err := do(ctx, c, http.MethodGet, b.nodes[0].base+"/metrics", b.o.AdminUser, b.o.AdminPassword, nil)
	if err != nil || st != http.StatusOK {
		return
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "devmsg_messages_published_total":
			published = int64(n)
		case "devmsg_messages_delivered_total":
			delivered = int64(n)
		}
	}
	return
}
